"""Per-query objectives of TTT-Embed (METHOD.md Part 1, "Objective").

Everything here works on one chunk of rows of the padded reward table:

- ``s``    float32 ``(C, K)``: student logits ``unit(x_q + v_g) . z_qi / tau_S``;
- ``mask`` bool ``(C, K)``: which candidates carry a reward (padding and ``nan`` are False).

Three objectives, all per query, all with the same teacher temperature and rewards:

- ``"kd"``   ``KL(p || pi)`` with teacher ``p = softmax(r / tau_T)`` (the default);
- ``"rkl"``  ``KL(pi || p)`` (reverse KL);
- ``"grpo"`` softmax-GRPO: reference ``pi0 = pi(v = 0)``, advantages
  ``A = (r - mean r) / max(std r, 1e-4)`` over the query's rewarded candidates (population
  standard deviation), ratio ``rho = pi / pi0``; the loss is minus
  ``mean_i min(rho_i A_i, clip(rho_i, 0.8, 1.2) A_i)``.

:func:`loss_and_grad` returns each query's loss and its analytic gradient with respect
to the logits (the hot path of :mod:`tttembed.adapt.optimize`); :func:`losses` computes
the same losses with plain differentiable torch ops (the autograd reference in tests).

torch is imported inside functions: importing this module stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tttembed.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

OBJECTIVES: tuple[str, ...] = ("kd", "rkl", "grpo")

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


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch ships with every learning extra
        from tttembed.errors import MissingDependency

        raise MissingDependency("torch", "st") from exc
    return torch


@dataclass(frozen=True)
class Targets:
    """Per-query constants derived once from the rewards (torch tensors, rows = queries).

    ``p``/``logp``: teacher probabilities and log-probabilities (0 where masked);
    ``adv``: GRPO advantages (0 where masked); ``logpi0``: GRPO reference log-policy
    (0 where masked); ``inv_k``: ``1 / K_q`` (number of rewarded candidates).
    """

    objective: str
    mask: torch.Tensor
    p: torch.Tensor
    logp: torch.Tensor
    adv: torch.Tensor
    logpi0: torch.Tensor
    inv_k: torch.Tensor

    def rows(self, start: int, stop: int) -> Targets:
        """The targets of rows ``start:stop`` (views, no copy)."""
        return Targets(
            self.objective, self.mask[start:stop], self.p[start:stop],
            self.logp[start:stop], self.adv[start:stop], self.logpi0[start:stop],
            self.inv_k[start:stop],
        )


def make_targets(
    objective: str,
    r: torch.Tensor,
    mask: torch.Tensor,
    s0: torch.Tensor | None = None,
    *,
    tau_t: float = TAU_T,
) -> Targets:
    """Teacher / advantages / reference for every row.

    ``r`` (N, K) rewards (any value where masked), ``mask`` (N, K) bool with at least one
    True per row; ``s0`` (N, K) the logits at ``v = 0`` (required for ``"grpo"``).
    """
    torch = import_torch()
    check_objective(objective)
    mask = mask.bool()
    r = torch.where(mask, r.float(), torch.zeros((), dtype=torch.float32))
    k = mask.sum(1).clamp_min(1).float()
    logp = _masked_log_softmax(r / tau_t, mask)
    p = logp.exp() * mask
    zeros = torch.zeros_like(r)
    adv, logpi0 = zeros, zeros
    if objective == "grpo":
        if s0 is None:
            raise ValueError("grpo needs the reference logits s0")
        mean = r.sum(1, keepdim=True) / k[:, None]
        dev = torch.where(mask, r - mean, zeros)
        std = ((dev * dev).sum(1, keepdim=True) / k[:, None]).sqrt()
        adv = dev / std.clamp_min(STD_FLOOR)
        logpi0 = _masked_log_softmax(s0.float(), mask)
    return Targets(objective, mask, p, logp, adv, logpi0, 1.0 / k)


def _masked_log_softmax(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log_softmax over the True entries of each row; 0 at masked entries."""
    torch = import_torch()
    neg = torch.full((), float("-inf"), dtype=s.dtype)
    out = torch.log_softmax(torch.where(mask, s, neg), dim=1)
    return torch.where(mask, out, torch.zeros((), dtype=s.dtype))


def losses(s: torch.Tensor, t: Targets) -> torch.Tensor:
    """Per-query losses ``(C,)`` from logits ``s`` (C, K): plain, differentiable torch ops."""
    torch = import_torch()
    logpi = _masked_log_softmax(s, t.mask)
    pi = logpi.exp() * t.mask
    zero = torch.zeros((), dtype=s.dtype)
    if t.objective == "kd":
        return torch.where(t.mask, t.p * (t.logp - logpi), zero).sum(1)
    if t.objective == "rkl":
        return torch.where(t.mask, pi * (logpi - t.logp), zero).sum(1)
    rho = torch.where(t.mask, (logpi - t.logpi0).exp(), zero)
    lo, hi = 1.0 - CLIP_EPS, 1.0 + CLIP_EPS
    term = torch.minimum(rho * t.adv, rho.clamp(lo, hi) * t.adv)
    return -torch.where(t.mask, term, zero).sum(1) * t.inv_k


def loss_and_grad(s: torch.Tensor, t: Targets) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-query losses ``(C,)`` and ``d loss_q / d s`` ``(C, K)`` (0 where masked).

    kd: ``pi - p``.  rkl: ``pi_j (h_j - sum_i pi_i h_i)`` with ``h = log pi - log p``.
    grpo: with ``g_i = A_i`` where the unclipped branch is the active one (else 0),
    ``-(g_j rho_j - pi_j sum_i g_i rho_i) / K_q``.
    """
    torch = import_torch()
    mask = t.mask
    logpi = _masked_log_softmax(s, mask)
    pi = logpi.exp().mul_(mask)
    if t.objective == "kd":
        loss = (t.p * (t.logp - logpi)).sum(1)
        return loss, pi.sub_(t.p)
    if t.objective == "rkl":
        h = (logpi - t.logp).mul_(mask)
        loss = (pi * h).sum(1)
        grad = pi * (h - loss[:, None])
        return loss, grad
    rho = (logpi - t.logpi0).exp_().mul_(mask)
    a = t.adv
    lo, hi = 1.0 - CLIP_EPS, 1.0 + CLIP_EPS
    clipped = ((rho > hi) & (a > 0)) | ((rho < lo) & (a < 0))
    term = torch.where(clipped, rho.clamp(lo, hi) * a, rho * a)
    loss = -(term * mask).sum(1) * t.inv_k
    gr = torch.where(clipped, torch.zeros((), dtype=s.dtype), a * rho)
    grad = (pi * gr.sum(1, keepdim=True)).sub_(gr).mul_(t.inv_k[:, None])
    return loss, grad
