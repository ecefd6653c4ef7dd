"""Per-query objectives of TTT-Embed (METHOD.md Part 1, "Objective").

Everything here works on rows of the padded reward table:

- ``s``    float32 ``(C, K)``: student logits ``unit(x_q + v_g) . z_qi / tau_S``;
- ``mask`` bool ``(C, K)``: which candidates carry a reward (padding and ``nan`` are False).

Three objectives, all per query, with the same rewards and temperatures:

- ``"kd"``   ``KL(p || pi)`` with teacher ``p = softmax(r / tau_T)`` (the default);
- ``"rkl"``  ``KL(pi || p)`` (reverse KL);
- ``"grpo"`` softmax-GRPO: reference ``pi0 = pi(v = 0)``, advantages
  ``A = (r - mean r) / max(std r, 1e-4)`` over the query's rewarded candidates (population
  standard deviation, so a query with one reward has ``A = 0``), ratio ``rho = pi / pi0``;
  the loss is minus ``mean_i min(rho_i A_i, clip(rho_i, 0.8, 1.2) A_i)``.

:func:`loss_and_grad` (numpy, the optimizer's hot path) returns each query's loss and its
analytic gradient with respect to the logits. :func:`reference_losses` computes the same
losses with plain differentiable torch ops: the autograd reference for tests and
baselines (torch is imported inside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.types import OBJECTIVES

#: Fixed hyperparameters (METHOD.md): never tuned on evaluation labels.
TAU_T = 0.02
TAU_S = 0.05
RIDGE = 0.3
STEPS = 300
LR = 0.01
CLIP_EPS = 0.2
STD_FLOOR = 1e-4


def check_objective(objective: str) -> str:
    """Return ``objective`` or raise ConfigError listing the known objectives."""
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}"
        )
    return objective


@dataclass(frozen=True, eq=False)
class Targets:
    """Per-query constants derived once from the rewards (numpy, rows = queries).

    ``neg``: 0 where rewarded, -inf elsewhere (float32); ``p``/``logp``: teacher
    probabilities and log-probabilities (0 where masked); ``plogp``: ``sum_i p_i log p_i``
    (N,); ``adv``: GRPO advantages; ``logpi0``: GRPO reference log-policy (both 0 where
    masked); ``inv_k``: ``1 / K_q``.
    """

    objective: str
    mask: np.ndarray
    neg: np.ndarray
    p: np.ndarray
    logp: np.ndarray
    plogp: np.ndarray
    adv: np.ndarray
    logpi0: np.ndarray
    inv_k: np.ndarray
    full: bool = False  # every candidate of these rows is rewarded (no masking needed)

    def rows(self, start: int, stop: int) -> Targets:
        """The targets of rows ``start:stop`` (views, no copy)."""
        sl = slice(start, stop)
        return Targets(
            self.objective, self.mask[sl], self.neg[sl], self.p[sl], self.logp[sl],
            self.plogp[sl], self.adv[sl], self.logpi0[sl], self.inv_k[sl],
            bool(self.mask[sl].all()),
        )


def masked_log_softmax(s: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(softmax, log-normaliser)`` of ``s`` over the entries where ``neg`` is 0.

    Returns ``pi`` (C, K), 0 where masked, and ``logz`` (C, 1) with
    ``log pi_i = s_i - logz`` at rewarded entries.
    """
    sm = s + neg
    mx = sm.max(axis=1, keepdims=True)
    e = np.exp(sm - mx)
    se = e.sum(axis=1, keepdims=True)
    e /= se
    return e, mx + np.log(se)


def make_targets(
    objective: str,
    r: np.ndarray,
    mask: np.ndarray,
    s0: np.ndarray | None = None,
    *,
    tau_t: float = TAU_T,
) -> Targets:
    """Teacher / advantages / reference for every row.

    ``r`` (N, K) rewards (any finite value where masked), ``mask`` (N, K) bool with at
    least one True per row; ``s0`` (N, K) the logits at ``v = 0`` (needed for ``"grpo"``).
    """
    check_objective(objective)
    mask = np.asarray(mask, dtype=bool)
    r = np.where(mask, np.asarray(r, dtype=np.float64), 0.0)
    neg = np.where(mask, 0.0, -np.inf)
    k = np.maximum(mask.sum(1), 1).astype(np.float64)
    p, logz = masked_log_softmax(r / tau_t, neg)
    logp = np.where(mask, r / tau_t - logz, 0.0)
    plogp = (p * logp).sum(1)
    adv = np.zeros_like(r)
    logpi0 = np.zeros_like(r)
    if objective == "grpo":
        if s0 is None:
            raise ValueError("grpo needs the reference logits s0")
        mean = r.sum(1, keepdims=True) / k[:, None]
        dev = np.where(mask, r - mean, 0.0)
        std = np.sqrt((dev * dev).sum(1, keepdims=True) / k[:, None])
        adv = dev / np.maximum(std, STD_FLOOR)
        s0 = np.asarray(s0, dtype=np.float64)
        _, logz0 = masked_log_softmax(s0, neg)
        logpi0 = np.where(mask, s0 - logz0, 0.0)
    f32 = np.float32
    return Targets(
        objective, mask, neg.astype(f32), p.astype(f32), logp.astype(f32),
        plogp.astype(f32), adv.astype(f32), logpi0.astype(f32), (1.0 / k).astype(f32),
        bool(mask.all()),
    )


def _student(s: np.ndarray, t: Targets) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`masked_log_softmax` for bounded logits (no max shift: |s| <= 1/tau_S)."""
    e = np.exp(s if t.full else s + t.neg)
    se = e.sum(axis=1, keepdims=True)
    e /= se
    return e, np.log(se, out=se)


def loss_and_grad(s: np.ndarray, t: Targets) -> tuple[np.ndarray, np.ndarray]:
    """Per-query losses ``(C,)`` and ``d loss_q / d s`` ``(C, K)`` (0 where masked).

    kd: ``pi - p``.  rkl: ``pi_j (h_j - sum_i pi_i h_i)`` with ``h = log pi - log p``.
    grpo: with ``g_i = A_i`` where the unclipped branch is the active one (else 0),
    ``(pi_j sum_i g_i rho_i - g_j rho_j) / K_q``. The logits must be bounded as student
    logits are (``|s| <= 1 / tau_S = 20``; float32 ``exp`` is exact enough up to ~80).
    """
    pi, logz = _student(s, t)
    if t.objective == "kd":
        loss = t.plogp - np.einsum("ck,ck->c", t.p, s) + logz[:, 0]
        pi -= t.p
        return loss, pi
    logpi = np.where(t.mask, s - logz, np.float32(0.0))
    if t.objective == "rkl":
        h = logpi - t.logp
        loss = np.einsum("ck,ck->c", pi, h)
        h -= loss[:, None]
        h *= pi
        return loss, h
    rho = np.exp(logpi - t.logpi0)
    rho *= t.mask
    a = t.adv
    lo, hi = np.float32(1.0 - CLIP_EPS), np.float32(1.0 + CLIP_EPS)
    clipped = ((rho > hi) & (a > 0)) | ((rho < lo) & (a < 0))
    gr = a * rho
    term = np.where(clipped, np.clip(rho, lo, hi) * a, gr)
    loss = -term.sum(1) * t.inv_k
    gr[clipped] = 0.0
    grad = pi * gr.sum(1, keepdims=True)
    grad -= gr
    grad *= t.inv_k[:, None]
    return loss, grad


def reference_losses(s: Any, t: Targets) -> Any:
    """Per-query losses from torch logits ``s`` (C, K) with plain, differentiable ops."""
    import torch

    mask = torch.from_numpy(t.mask)
    zero = torch.zeros((), dtype=s.dtype)
    logpi = torch.log_softmax(s.masked_fill(~mask, float("-inf")), dim=1)
    logpi = torch.where(mask, logpi, zero)
    pi = logpi.exp() * mask
    p, logp = torch.from_numpy(t.p), torch.from_numpy(t.logp)
    if t.objective == "kd":
        return torch.where(mask, p * (logp - logpi), zero).sum(1)
    if t.objective == "rkl":
        return torch.where(mask, pi * (logpi - logp), zero).sum(1)
    adv = torch.from_numpy(t.adv)
    rho = torch.where(mask, (logpi - torch.from_numpy(t.logpi0)).exp(), zero)
    term = torch.minimum(rho * adv, rho.clamp(1.0 - CLIP_EPS, 1.0 + CLIP_EPS) * adv)
    return -torch.where(mask, term, zero).sum(1) * torch.from_numpy(t.inv_k)
