"""The adapter scope (METHOD.md Part 4): per task a low-rank query-side map.

A task's query ``x`` becomes ``unit(x + alpha (v + U V^T x))`` with ``U``, ``V`` (d, r).
Learning starts at the task-wise state (``v`` = the task's learned vector, ``V = 0`` and
``U`` small random, so ``U V^T = 0``) and takes the same objective's full-batch Adam
steps as the other scopes on ``u = x + v + U V^T x`` (lr, betas, eps, steps as
:func:`tttembed.adapt.optimize.learn_vectors`), with the ridge ``RIDGE ||v||^2`` on ``v``
and weight decay ``WEIGHT_DECAY (||U||^2 + ||V||^2)`` toward the identity map. Alpha is
the rule's ``n_g / (n_g + 1)``, as for a task state.

Fixed defaults (never tuned on evaluation labels; docs/method-notes.md): rank 8 (the
rank the issue fixes; Search-Adaptor's and Chroma's adapters are small maps of this
order), weight decay 0.01 (fixed once by a sweep on SciFact's *train* split only: 80% of
the train claims rewarded, the other 20% evaluated; the vectors' ridge 0.3 kept the map
at zero), ``U`` drawn with standard deviation ``INIT_SCALE / sqrt(d)`` from a seeded
generator.

Groups are independent (each task's loss depends only on its own ``v``, ``U``, ``V``),
so each is learned alone; every step is three matrix products over the group's rows
beyond the task-wise step's (``x V``, ``(x V) U^T`` and the two gradients).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.batch import BETAS, EPS, RewardBatch
from tttembed.adapt.objectives import (
    LR,
    RIDGE,
    STEPS,
    TAU_S,
    TAU_T,
    check_objective,
    loss_and_grad,
    make_targets,
)
from tttembed.adapt.parts import StateParts
from tttembed.core.devices import one_blas_thread
from tttembed.core.errors import ConfigError, DataError

#: Default rank of the map.
RANK = 8
#: Weight decay on ``U`` and ``V`` (toward ``U V^T = 0``, the identity map): fixed on
#: SciFact's train split (docs/method-notes.md), never on evaluation labels.
WEIGHT_DECAY = 0.01
#: ``U``'s start: normal with standard deviation ``INIT_SCALE / sqrt(d)``.
INIT_SCALE = 0.01


def check_rank(rank: int, dim: int | None = None) -> int:
    """A rank of at least 1 and, given the embedder's dimension ``dim``, at most ``dim``
    (a map ``U V^T`` of a ``dim``-dimension space has no higher rank)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"--rank must be a positive integer, got {rank!r} (e.g. --rank 8)")
    if dim is not None and rank > dim:
        raise ConfigError(f"--rank {rank} is above the embedder's dimension {dim}: give "
                          f"--rank {dim} or less (e.g. --rank {min(RANK, dim)})")
    return rank


@dataclass(frozen=True, eq=False)
class AdapterResult:
    """Every group's vector ``vectors`` (G, d), maps ``u``, ``v`` (G, d, r), final loss
    and the settings."""

    vectors: np.ndarray
    u: np.ndarray
    v: np.ndarray
    final_loss: np.ndarray
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    def parts(self) -> StateParts:
        """The state parts holding every group's map."""
        return StateParts(np.arange(len(self.vectors), dtype=np.int64), self.u, self.v)


def adapter_hyperparameters(rank: int = RANK) -> dict[str, Any]:
    """The adapter's settings, recorded in the state's hyperparameters."""
    return {"rank": int(rank), "weight_decay": WEIGHT_DECAY, "init_scale": INIT_SCALE,
            "init": "v = task-wise vector, V = 0, U ~ N(0, (init_scale / sqrt(d))^2)"}


class _Rows:
    """One group's rows: query vectors, candidates, targets and weights. A step reads the
    candidates twice (``z . u`` and ``z^T dL/ds``, batched mat-vecs), as the task-wise
    step does; the map's products are (N, d) x (d, r)."""

    def __init__(self, batch: RewardBatch, rows: np.ndarray, objective: str) -> None:
        self.x = batch.x[rows]
        self.z = batch.z[rows]
        self.w = batch.weight[rows].astype(np.float32)
        s0 = None
        if objective == "grpo":
            base = np.matmul(self.z, self.x[:, :, None])[:, :, 0]
            s0 = base / (TAU_S * np.linalg.norm(self.x, axis=1))[:, None]
        mask = batch.mask if batch.mask is not None else np.isfinite(batch.r)
        self.t = make_targets(objective, batch.r[rows], mask[rows], s0, tau_t=TAU_T)

    def loss_grad(self, v: np.ndarray, u_map: np.ndarray, v_map: np.ndarray
                  ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Weighted loss and its gradients with respect to ``v``, ``U`` and ``V``."""
        xv = self.x @ v_map                                   # (N, r)
        u = self.x + v + xv @ u_map.T                         # (N, d)
        nrm = np.sqrt(np.einsum("nd,nd->n", u, u))
        s = np.matmul(self.z, u[:, :, None])[:, :, 0]
        s *= (1.0 / TAU_S / nrm)[:, None]
        loss, gs = loss_and_grad(s, self.t)
        gs *= (self.w / TAU_S / nrm)[:, None]
        c = np.einsum("nk,nk->n", gs, s) * (TAU_S / nrm)
        gu = np.matmul(gs[:, None, :], self.z)[:, 0, :]
        gu -= c[:, None] * u                                  # dL/du per row
        return (float(np.dot(loss, self.w)), gu.sum(0), gu.T @ xv,
                self.x.T @ (gu @ u_map))


def _adam(params: list[np.ndarray], grads: list[np.ndarray], m: list[np.ndarray],
          s: list[np.ndarray], t: int, lr: float) -> None:
    """One Adam step (PyTorch's update) on every parameter array, in place."""
    bc1, bc2 = 1.0 - BETAS[0] ** t, 1.0 - BETAS[1] ** t
    for p, g, mi, si in zip(params, grads, m, s):
        mi *= BETAS[0]
        mi += (1.0 - BETAS[0]) * g
        si *= BETAS[1]
        si += (1.0 - BETAS[1]) * g * g
        p -= (lr / bc1) * mi / (np.sqrt(si) / np.sqrt(bc2) + EPS)


def learn_adapters(batch: RewardBatch, n_groups: int, start: np.ndarray,
                   objective: str = "kd", *, rank: int = RANK, steps: int = STEPS,
                   lr: float = LR, weight_decay: float = WEIGHT_DECAY, seed: int = 0
                   ) -> AdapterResult:
    """Learn every group's ``v``, ``U``, ``V`` from ``v = start[g]`` and ``U V^T = 0``
    (module docstring). ``steps=0`` returns the start: the task-wise state."""
    check_objective(objective)
    check_rank(rank)
    start = np.asarray(start, np.float32)
    d = batch.dim
    if start.shape != (n_groups, d):
        raise DataError(f"start vectors have shape {start.shape}, expected ({n_groups}, {d})")
    vecs = start.copy()
    us = np.zeros((n_groups, d, rank), np.float32)
    vs = np.zeros_like(us)
    final = np.zeros(n_groups)
    with one_blas_thread():
        for g in range(n_groups):
            rows = np.flatnonzero(batch.group == g)
            rng = np.random.default_rng([seed, g])
            us[g] = rng.normal(0.0, INIT_SCALE / np.sqrt(d), (d, rank)).astype(np.float32)
            if not len(rows):
                continue
            final[g] = _learn_group(_Rows(batch, rows, objective), vecs[g], us[g], vs[g],
                                    steps, lr, weight_decay)
    hp = adapter_hyperparameters(rank)
    hp["weight_decay"] = float(weight_decay)
    return AdapterResult(vecs, us, vs, final, hp)


def _learn_group(rows: _Rows, v: np.ndarray, u_map: np.ndarray, v_map: np.ndarray,
                 steps: int, lr: float, weight_decay: float) -> float:
    """Adam on one group's parameters, in place; returns the final regularised loss."""
    params = [v, u_map, v_map]
    m = [np.zeros_like(p) for p in params]
    s = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        _, gv, gu, gw = rows.loss_grad(v, u_map, v_map)
        gv += 2.0 * RIDGE * v
        gu += 2.0 * weight_decay * u_map
        gw += 2.0 * weight_decay * v_map
        _adam(params, [gv, gu, gw], m, s, t, lr)
    loss = rows.loss_grad(v, u_map, v_map)[0]
    return loss + RIDGE * float(v @ v) + weight_decay * float(
        np.vdot(u_map, u_map) + np.vdot(v_map, v_map))


def map_deltas(x: np.ndarray, parts: StateParts, rows: np.ndarray) -> np.ndarray:
    """``U V^T x`` of each query ``x[i]`` under the map of state row ``rows[i]`` (zero
    where that row has no map); one pair of products per distinct map in the batch."""
    out = np.zeros_like(x, dtype=np.float32)
    if not len(parts.adapter_rows) or not len(rows):
        return out
    pos = np.full(int(max(rows.max(), parts.adapter_rows.max())) + 1, -1, np.int64)
    pos[parts.adapter_rows] = np.arange(len(parts.adapter_rows))
    p = np.where(rows >= 0, pos[np.maximum(rows, 0)], -1)
    maps = np.unique(p)
    if len(maps) == 1 and maps[0] >= 0:  # one map for the whole batch: no gather
        return (np.asarray(x, np.float32) @ parts.v[maps[0]]) @ parts.u[maps[0]].T
    for a in maps[maps >= 0].tolist():
        hit = p == a
        out[hit] = (x[hit] @ parts.v[a]) @ parts.u[a].T
    return out


__all__ = ["INIT_SCALE", "RANK", "WEIGHT_DECAY", "AdapterResult", "adapter_hyperparameters",
           "check_rank", "learn_adapters", "map_deltas"]
