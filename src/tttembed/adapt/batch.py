"""The reward table one scope is learned from (:class:`RewardBatch`), what learning
returns (:class:`LearnResult`) and the fixed settings it records (:func:`hyperparameters`).
Data only; the optimizer is :mod:`tttembed.adapt.optimize`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.objectives import LR, RIDGE, STEPS, TAU_S, TAU_T, check_objective
from tttembed.core.errors import DataError

BETAS = (0.9, 0.999)
EPS = 1e-8


@dataclass(frozen=True, eq=False)
class RewardBatch:
    """The padded reward table of one scope (validated; arrays are not copied if possible).

    x (N, d) float32 unit query vectors; z (N, K, d) float32 unit candidate vectors
    (finite, any value where masked); r (N, K) rewards on [0, 1], ``nan`` = missing;
    group (N,) int; weight (N,) >= 0; mask (N, K) bool (None = every finite reward).
    After construction ``mask`` is ``mask & isfinite(r)``, ``r`` is float32 with 0 where
    masked, and every row has at least one reward. Rows are distinct queries.
    """

    x: np.ndarray
    z: np.ndarray
    r: np.ndarray
    group: np.ndarray
    weight: np.ndarray
    mask: np.ndarray | None = None

    def __post_init__(self) -> None:
        x = np.ascontiguousarray(self.x, dtype=np.float32)
        z = np.ascontiguousarray(self.z, dtype=np.float32)
        r = np.asarray(self.r, dtype=np.float64)
        if x.ndim != 2 or z.ndim != 3 or r.ndim != 2:
            raise DataError("reward table needs x (N, d), z (N, K, d) and r (N, K)")
        n, d = x.shape
        if z.shape[0] != n or z.shape[2] != d or r.shape != z.shape[:2]:
            raise DataError(f"reward table shapes disagree: x {x.shape}, z {z.shape}, r {r.shape}")
        mask = np.isfinite(r)
        if self.mask is not None:
            given = np.asarray(self.mask, dtype=bool)
            if given.shape != r.shape:
                raise DataError(f"mask shape {given.shape} differs from rewards {r.shape}")
            mask &= given
        group = np.asarray(self.group)
        weight = np.asarray(self.weight, dtype=np.float64)
        if group.shape != (n,) or weight.shape != (n,):
            raise DataError(f"group and weight need one entry per row ({n})")
        if n and (not np.issubdtype(group.dtype, np.integer) or group.min() < 0):
            raise DataError("group indices must be integers >= 0")
        if not np.all(np.isfinite(weight)) or np.any(weight < 0):
            raise DataError("query weights must be finite and >= 0")
        empty = np.flatnonzero(~mask.any(1))
        if empty.size:
            raise DataError(f"row {int(empty[0])} has no reward",
                            fix="drop queries without rewards before building the reward table")
        vals = r[mask]
        if vals.size and (vals.min() < -1e-6 or vals.max() > 1 + 1e-6):
            raise DataError(f"rewards must lie on [0, 1], got [{vals.min():.4g}, {vals.max():.4g}]",
                            fix="map the scorer's scores to [0, 1]")
        _check_unit("query vectors", np.einsum("nd,nd->n", x, x))
        zsq = np.einsum("nkd,nkd->nk", z, z)
        if not np.all(np.isfinite(zsq)):
            raise DataError("candidate vectors contain nan or inf", fix="pass finite vectors")
        _check_unit("candidate vectors", zsq[mask])
        r = np.where(mask, np.clip(r, 0.0, 1.0), 0.0).astype(np.float32)
        for name, value in (("x", x), ("z", z), ("r", r), ("mask", mask),
                            ("group", group.astype(np.int64)), ("weight", weight)):
            object.__setattr__(self, name, value)

    n = property(lambda self: int(self.x.shape[0]), doc="number of rows (queries)")
    dim = property(lambda self: int(self.x.shape[1]), doc="vector dimension")

    @classmethod
    def from_ragged(cls, x: np.ndarray, z: Sequence[np.ndarray], r: Sequence[np.ndarray],
                    group: np.ndarray, weight: np.ndarray) -> RewardBatch:
        """Pad per-query candidates ``z[q]`` (K_q, d) and rewards ``r[q]`` (K_q,)."""
        x = np.asarray(x, dtype=np.float32)
        if len(z) != len(r) or len(z) != len(x):
            raise DataError("give one candidate array and one reward array per query")
        k = max((len(a) for a in r), default=0)
        zz = np.zeros((len(x), k, x.shape[1]), dtype=np.float32)
        rr = np.full((len(x), k), np.nan)
        for i, (zi, ri) in enumerate(zip(z, r)):
            zz[i, : len(ri)] = zi
            rr[i, : len(ri)] = ri
        return cls(x, zz, rr, group, weight)


def _check_unit(what: str, sq: np.ndarray) -> None:
    if sq.size and np.max(np.abs(np.sqrt(sq) - 1.0)) > 1e-3:
        raise DataError(f"{what} are not L2-normalised", fix="pass unit vectors")


@dataclass(frozen=True, eq=False)
class LearnResult:
    """vectors (G, d) float32; final_loss (G,) ``L_g`` at the returned vectors; n_g (G,)
    rewarded queries per group; alpha (G,) ``n_g / (n_g + 1)``; loss_trace (steps,) total
    ``sum_g L_g`` before each update; the hyperparameters it was learned with."""

    vectors: np.ndarray
    final_loss: np.ndarray
    n_g: np.ndarray
    alpha: np.ndarray
    loss_trace: np.ndarray
    hyperparameters: dict[str, Any] = field(default_factory=dict)


def hyperparameters(objective: str = "kd", steps: int = STEPS, lr: float = LR) -> dict[str, Any]:
    """The settings a state was learned with (recorded in the state file)."""
    return {
        "objective": check_objective(objective), "tau_t": TAU_T, "tau_s": TAU_S,
        "ridge": RIDGE, "steps": int(steps), "lr": float(lr), "optimizer": "adam",
        "betas": list(BETAS), "eps": EPS, "init": "zeros", "alpha": "n/(n+1)",
    }
