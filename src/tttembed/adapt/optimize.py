"""Learn the vectors of every group of one scope as ONE batched problem.

Input is a :class:`RewardBatch`, the padded reward table of one scope: row ``q`` holds a
rewarded query's unit vector ``x_q``, its rewarded candidates' unit document vectors
``z_q`` (K, d), rewards ``r_q`` (K,) on [0, 1] (``nan`` = missing: the candidate is
dropped), a mask for padding, its group and its weight ``w_q``.

All groups at once. ``V`` (G, d) is one parameter; row ``q`` uses ``V[group[q]]``. The
total ``sum_g L_g(v_g)`` is separable across groups (group ``g``'s loss depends on
``v_g`` only), so its gradient with respect to ``V[g]`` is exactly ``grad L_g(v_g)``.
Adam is elementwise (first and second moments, bias corrections and the step are
computed per coordinate, with a step count shared by all coordinates), so one Adam on
the stacked ``V`` follows exactly the trajectory of one Adam per group: groups are
independent (tested to 1e-5 against learning each group alone).

The hot path. Each step streams the candidate tensor in chunks of queries; for a chunk
it computes the logits ``s = z y / tau_S`` (one batched mat-vec), the objective's
analytic logit gradient, and ``dL/dy = z^T (dL/ds) / tau_S`` (the second mat-vec) while
the chunk is still in cache, so the step reads ``z`` from memory about once. The
gradient through ``y = unit(u)``, ``u = x + v``, is ``(dL/dy - (y . dL/dy) y) / ||u||``
with ``y . dL/dy = tau_S * sum_i (dL/ds_i) s_i`` (no extra pass). No Python loop over
queries or groups; memory beyond ``z`` is O(N d + N K + G d).

torch is imported inside the functions; computation is float32 on CPU and
deterministic for a fixed torch thread count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.objectives import (
    LR,
    RIDGE,
    STEPS,
    TAU_S,
    TAU_T,
    check_objective,
    import_torch,
    loss_and_grad,
    losses,
    make_targets,
)
from tttembed.adapt.scopes import alpha_from_counts
from tttembed.errors import DataError

#: Bytes of candidate vectors per chunk: large enough to amortise per-chunk overhead,
#: small enough that the second pass over a chunk hits cache.
CHUNK_BYTES = 8 << 20
_NORM_TOL = 1e-3


@dataclass(frozen=True, eq=False)
class RewardBatch:
    """The padded reward table of one scope (validated; arrays are not copied if possible).

    x (N, d) float32 unit query vectors; z (N, K, d) float32 unit candidate vectors
    (anything where masked); r (N, K) rewards on [0, 1], ``nan`` = missing; mask (N, K)
    bool (None = every finite reward); group (N,) int64; weight (N,) float64. After
    construction ``mask`` is ``mask & isfinite(r)`` and every row has a reward.
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
            raise DataError(
                f"reward table shapes disagree: x {x.shape}, z {z.shape}, r {r.shape}"
            )
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
            raise DataError(
                f"row {int(empty[0])} has no reward",
                fix="drop queries without rewards before building the reward table",
            )
        vals = r[mask]
        if vals.size and (vals.min() < -1e-6 or vals.max() > 1 + 1e-6):
            raise DataError(
                f"rewards must lie on [0, 1], got [{vals.min():.4g}, {vals.max():.4g}]",
                fix="map the scorer's scores to [0, 1]",
            )
        _check_unit("query vectors", np.einsum("nd,nd->n", x, x))
        _check_unit("candidate vectors", np.einsum("nkd,nkd->nk", z, z)[mask])
        r = np.where(mask, r, 0.0).astype(np.float32)
        for name, value in (("x", x), ("z", z), ("r", r), ("mask", mask),
                            ("group", group.astype(np.int64)), ("weight", weight)):
            object.__setattr__(self, name, value)

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    @classmethod
    def from_ragged(
        cls,
        x: np.ndarray,
        z: Sequence[np.ndarray],
        r: Sequence[np.ndarray],
        group: np.ndarray,
        weight: np.ndarray,
    ) -> RewardBatch:
        """Pad per-query candidate lists ``z[q]`` (K_q, d) and rewards ``r[q]`` (K_q,)."""
        x = np.asarray(x, dtype=np.float32)
        if len(z) != len(r) or len(z) != len(x):
            raise DataError("give one candidate array and one reward array per query")
        k = max((len(a) for a in r), default=0)
        zz = np.zeros((len(x), k, x.shape[1]), dtype=np.float32)
        rr = np.full((len(x), k), np.nan)
        for i, (zi, ri) in enumerate(zip(z, r)):
            ri = np.asarray(ri, dtype=np.float64)
            zz[i, : len(ri)] = zi
            rr[i, : len(ri)] = ri
        return cls(x, zz, rr, group, weight)


def _check_unit(what: str, sq: np.ndarray) -> None:
    if sq.size and np.max(np.abs(np.sqrt(sq) - 1.0)) > _NORM_TOL:
        raise DataError(f"{what} are not L2-normalised", fix="pass unit vectors")


@dataclass(frozen=True, eq=False)
class LearnResult:
    """vectors (G, d) float32; final_loss (G,) ``L_g`` at the returned vectors;
    n_g (G,) rewarded queries per group; alpha (G,) ``n_g / (n_g + 1)``; loss_trace
    (steps,) total loss ``sum_g L_g`` before each update; hyperparameters as recorded."""

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
        "betas": [0.9, 0.999], "eps": 1e-8, "init": "zeros", "alpha": "n/(n+1)",
    }


def chunk_rows(k: int, d: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Queries per chunk so that a chunk of candidates takes about ``chunk_bytes``."""
    return max(1, int(chunk_bytes) // max(1, 4 * k * d))


class _Problem:
    """Torch views of the batch, the targets and the chunking (built once)."""

    def __init__(self, batch: RewardBatch, n_groups: int, objective: str, chunk: int) -> None:
        torch = import_torch()
        self.torch = torch
        self.x = torch.from_numpy(batch.x)
        self.z = torch.from_numpy(batch.z)
        self.group = torch.from_numpy(batch.group)
        self.w = torch.from_numpy(batch.weight.astype(np.float32))
        n, k = batch.r.shape
        self.bounds = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]
        mask = torch.from_numpy(batch.mask)
        r = torch.from_numpy(batch.r)
        s0 = None
        if objective == "grpo":
            s0 = torch.empty(n, k)
            for a, b in self.bounds:
                s0[a:b] = torch.bmm(self.z[a:b], self.x[a:b, :, None])[:, :, 0] / TAU_S
        self.targets = make_targets(objective, r, mask, s0, tau_t=TAU_T)
        self.chunks = [
            (a, b, self.x[a:b], self.z[a:b], self.group[a:b], self.w[a:b, None],
             self.targets.rows(a, b))
            for a, b in self.bounds
        ]
        self.n_groups = n_groups

    def grad(self, v: Any, out: Any) -> Any:
        """Write ``d sum_q w_q loss_q / dV`` into ``out``; return ``sum_q w_q loss_q``."""
        torch = self.torch
        out.zero_()
        total = torch.zeros((), dtype=torch.float64)
        for _a, _b, x, z, g, w, t in self.chunks:
            u = v.index_select(0, g).add_(x)
            nrm = torch.linalg.vector_norm(u, dim=1, keepdim=True)
            y = u.div_(nrm)
            s = torch.bmm(z, y[:, :, None])[:, :, 0].mul_(1.0 / TAU_S)
            loss, gs = loss_and_grad(s, t)
            gs.mul_(w)
            total += torch.dot(loss, w[:, 0]).double()
            gy = torch.bmm(gs[:, None, :], z)[:, 0, :].mul_(1.0 / TAU_S)
            dot = (gs * s).sum(1, keepdim=True)
            gu = gy.sub_(y.mul_(dot)).div_(nrm)
            out.index_add_(0, g, gu)
        return total

    def group_losses(self, v: Any) -> np.ndarray:
        """``sum_{q in g} w_q loss_q`` per group, float64 (G,)."""
        torch = self.torch
        acc = torch.zeros(self.n_groups, dtype=torch.float64)
        for _a, _b, x, z, g, w, t in self.chunks:
            y = torch.nn.functional.normalize(v.index_select(0, g) + x, dim=1)
            s = torch.bmm(z, y[:, :, None])[:, :, 0] / TAU_S
            acc.index_add_(0, g, (losses(s, t) * w[:, 0]).double())
        return acc.numpy()


def learn_vectors(
    batch: RewardBatch,
    n_groups: int,
    objective: str = "kd",
    *,
    steps: int = STEPS,
    lr: float = LR,
    chunk_size: int | None = None,
    callback: Callable[[int], None] | None = None,
) -> LearnResult:
    """Minimise ``L_g(v) = sum_{q in g} w_q loss_q(v) + 0.3 ||v||^2`` for every group.

    From ``v = 0``, ``steps`` full-batch Adam steps (lr ``lr``, betas (0.9, 0.999),
    eps 1e-8). ``chunk_size`` = queries per chunk (default: about 8 MiB of candidates).
    ``callback(step)`` is called after each step (1-based), e.g. for a progress bar.
    Groups with no row keep ``v = 0`` and ``alpha = 0``.
    """
    torch = import_torch()
    check_objective(objective)
    if n_groups < 1:
        raise ValueError("n_groups must be >= 1")
    if batch.n and int(batch.group.max()) >= n_groups:
        raise DataError(f"group index {int(batch.group.max())} >= n_groups={n_groups}")
    if steps < 0:
        raise ValueError("steps must be >= 0")
    k = batch.r.shape[1]
    chunk = chunk_size or chunk_rows(k, batch.dim)
    prob = _Problem(batch, n_groups, objective, chunk)
    v = torch.zeros(n_groups, batch.dim, dtype=torch.float32, requires_grad=True)
    grad = torch.zeros_like(v)
    opt = _adam(torch, v, lr)
    trace = np.zeros(steps, dtype=np.float64)
    with torch.no_grad():
        for step in range(steps):
            total = prob.grad(v, grad)
            sq = torch.dot(v.view(-1), v.view(-1))
            trace[step] = float(total) + RIDGE * float(sq)
            v.grad = grad.add_(v, alpha=2.0 * RIDGE)
            opt.step()
            if callback is not None:
                callback(step + 1)
        final = prob.group_losses(v) + RIDGE * (v.double() ** 2).sum(1).numpy()
    n_g = np.bincount(batch.group, minlength=n_groups).astype(np.int64)
    return LearnResult(
        vectors=v.detach().numpy().copy(),
        final_loss=final,
        n_g=n_g,
        alpha=alpha_from_counts(n_g),
        loss_trace=trace,
        hyperparameters=hyperparameters(objective, steps, lr),
    )


def _adam(torch: Any, v: Any, lr: float) -> Any:
    """Standard Adam; the fused CPU kernel (one pass over V) where torch has it."""
    try:
        return torch.optim.Adam([v], lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch
        return torch.optim.Adam([v], lr=lr, betas=(0.9, 0.999), eps=1e-8)
