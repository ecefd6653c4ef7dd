"""Learn the vectors of every group of one scope as ONE batched problem.

Input is a :class:`RewardBatch`, the padded reward table of one scope: row ``q`` holds a
rewarded query's unit vector ``x_q``, its rewarded candidates' unit document vectors
``z_q`` (K, d), rewards ``r_q`` (K,) on [0, 1] (``nan`` = missing: the candidate is
dropped), a padding mask, its group and its weight ``w_q``.

All groups at once. ``V`` (G, d) holds every group's vector; row ``q`` uses
``V[group[q]]``. The total ``sum_g L_g(v_g)`` is separable (group ``g``'s loss depends
on ``v_g`` only), so its gradient with respect to ``V[g]`` is exactly ``grad L_g``.
Adam is elementwise: moments, bias corrections and the step are per coordinate, with a
step count shared by all, so one Adam on the stacked ``V`` follows exactly the
trajectory of one Adam per group (tested to 1e-5 against learning each group alone).
Because of that, a group's Adam update can run as soon as its gradient is complete.

The hot path (numpy, float32, one thread, no autograd). Each step streams the
candidate tensor in chunks of queries (about :data:`CHUNK_BYTES` each). For a chunk it
computes the logits ``s = z y / tau_S`` (one batched mat-vec), the objective's analytic
logit gradient, and ``dL/dy = z^T dL/ds / tau_S`` (the second mat-vec) while the chunk is
still in cache, so ``z`` is read from memory about once per step. Through
``y = unit(u)``, ``u = x + v``: ``dL/du = (dL/dy - (y . dL/dy) y) / ||u||`` with
``y . dL/dy = tau_S sum_i (dL/ds_i) s_i`` (no extra pass). Group gradients are reduced
inside the chunk; groups whose last row is in the chunk take their Adam step there
(for query-wise scope every group, so the optimizer state is also touched in cache).
No Python loop over queries or groups; memory beyond ``z`` is O(N K + G d).
Deterministic: the same inputs give bit-identical vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.adapt.objectives import (
    LR, RIDGE, STEPS, TAU_S, TAU_T, Targets, check_objective, loss_and_grad, make_targets,
)
from tttembed.adapt.scopes import alpha_from_counts
from tttembed.errors import DataError

#: Bytes of candidate vectors per chunk: large enough to amortise the per-chunk Python
#: overhead, small enough that the second pass over the chunk hits cache.
CHUNK_BYTES = 4 << 20
BETAS = (0.9, 0.999)
EPS = 1e-8
_NORM_TOL = 1e-3


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

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

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
    if sq.size and np.max(np.abs(np.sqrt(sq) - 1.0)) > _NORM_TOL:
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


def chunk_rows(k: int, d: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Queries per chunk so that a chunk of candidates takes about ``chunk_bytes``."""
    return max(1, int(chunk_bytes) // max(1, 4 * k * d))


Index = slice | np.ndarray


@dataclass(frozen=True, eq=False)
class _Chunk:
    """One chunk of rows and its precomputed plan (how to gather and reduce groups)."""

    rows: slice
    x: np.ndarray
    z: np.ndarray
    t: Targets
    wt: np.ndarray          # (C, 1) w_q / tau_S
    gather: int | Index     # V rows of the chunk: one group, a range, or an index array
    groups: np.ndarray      # (C,) group of each row
    uniq: Index             # groups present in the chunk (reduction order)
    order: np.ndarray | None  # stable sort of rows by group, None when not needed
    starts: np.ndarray | None  # reduceat segment starts in sorted order
    local: Index | None     # positions in uniq of groups entirely inside this chunk
    local_ids: Index | None
    span: np.ndarray        # positions in uniq of groups spanning several chunks
    span_ids: np.ndarray
    done: np.ndarray        # spanning groups whose last row is in this chunk


def _as_index(ids: np.ndarray) -> Index:
    """A slice when ``ids`` is a consecutive increasing range (cheap views), else ids."""
    if ids.size and np.all(np.diff(ids) == 1):
        return slice(int(ids[0]), int(ids[-1]) + 1)
    return ids


def _plan(batch: RewardBatch, targets: Targets, chunk: int) -> list[_Chunk]:
    n, g = batch.n, batch.group
    bounds = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]
    chunk_of = np.repeat(np.arange(len(bounds)), [b - a for a, b in bounds])
    first = np.full(int(g.max()) + 1 if n else 0, len(bounds))
    last = np.full_like(first, -1)
    np.minimum.at(first, g, chunk_of)
    np.maximum.at(last, g, chunk_of)
    wt = (batch.weight / TAU_S).astype(np.float32)[:, None]
    plans = []
    for c, (a, b) in enumerate(bounds):
        gc = g[a:b]
        uniq, idx = np.unique(gc, return_index=True)
        order = starts = None
        if uniq.size == 1:
            gather: int | Index = int(uniq[0])
        elif uniq.size == gc.size:
            gather, uniq = _as_index(gc), gc
        else:
            gather = gc
            order = np.argsort(gc, kind="stable")
            starts = np.searchsorted(gc[order], uniq)
        is_local = (first[uniq] == c) & (last[uniq] == c)
        loc = np.flatnonzero(is_local)
        local = local_ids = None
        if loc.size:
            local, local_ids = _as_index(loc), _as_index(uniq[loc])
        span = np.flatnonzero(~is_local)
        plans.append(_Chunk(
            slice(a, b), batch.x[a:b], batch.z[a:b], targets.rows(a, b), wt[a:b], gather, gc,
            _as_index(uniq), order, starts, local, local_ids, span, uniq[span],
            uniq[span][last[uniq[span]] == c],
        ))
    return plans


class _Adam:
    """Adam (PyTorch's update, float32) on rows of V; a step count shared by all rows."""

    def __init__(self, g: int, d: int, lr: float) -> None:
        self.v = np.zeros((g, d), dtype=np.float32)
        self.m = np.zeros_like(self.v)
        self.s = np.zeros_like(self.v)
        self.lr, self.t = lr, 0

    def next_step(self) -> None:
        self.t += 1
        self.step_size = self.lr / (1.0 - BETAS[0] ** self.t)
        self.bc2_sqrt = math.sqrt(1.0 - BETAS[1] ** self.t)

    def update(self, ids: Index, grad: np.ndarray) -> float:
        """Step the rows ``ids`` with loss gradient ``grad`` (ridge added here).

        Returns ``ridge * ||v||^2`` of those rows before the step."""
        fancy = not isinstance(ids, slice)
        v, m, s = self.v[ids], self.m[ids], self.s[ids]
        ridge = RIDGE * float(np.einsum("gd,gd->", v, v, dtype=np.float64))
        grad += (2.0 * RIDGE) * v
        m += (1.0 - BETAS[0]) * (grad - m)
        grad *= grad
        s *= BETAS[1]
        s += (1.0 - BETAS[1]) * grad
        denom = np.sqrt(s)
        denom /= self.bc2_sqrt
        denom += EPS
        np.divide(m, denom, out=denom)
        denom *= self.step_size
        v -= denom
        if fancy:
            self.v[ids], self.m[ids], self.s[ids] = v, m, s
        return ridge


def _forward(ch: _Chunk, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(y, ||u||, logits)`` of the chunk's rows for the vectors ``v``."""
    u = ch.x + v[ch.gather]
    nrm = np.sqrt(np.einsum("cd,cd->c", u, u))[:, None]
    u /= nrm
    s = np.matmul(ch.z, u[:, :, None])[:, :, 0]
    s *= np.float32(1.0 / TAU_S)
    return u, nrm, s


def _step(plans: list[_Chunk], adam: _Adam, acc: np.ndarray) -> float:
    """One full-batch Adam step over every group; returns the total loss before it."""
    adam.next_step()
    total = 0.0
    tau = np.float32(TAU_S)
    for ch in plans:
        y, nrm, s = _forward(ch, adam.v)
        loss, gs = loss_and_grad(s, ch.t)
        total += float(np.dot(loss, ch.wt[:, 0])) * TAU_S
        gs *= ch.wt
        gu = np.matmul(gs[:, None, :], ch.z)[:, 0, :]
        dot = np.einsum("ck,ck->c", gs, s)[:, None]
        dot *= tau
        y *= dot
        gu -= y
        gu /= nrm
        if ch.order is not None:
            red = np.add.reduceat(gu[ch.order], ch.starts, axis=0)
        elif isinstance(ch.gather, int):
            red = gu.sum(axis=0, keepdims=True)
        else:
            red = gu
        if ch.local is not None:
            total += adam.update(ch.local_ids, red if ch.span.size == 0 else red[ch.local])
        if ch.span.size:
            acc[ch.span_ids] += red[ch.span]
            if ch.done.size:
                total += adam.update(ch.done, acc[ch.done])
                acc[ch.done] = 0.0
    return total


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

    From ``v = 0``: ``steps`` full-batch Adam steps (lr ``lr``, betas (0.9, 0.999),
    eps 1e-8). ``chunk_size`` = queries per chunk (default: about 4 MiB of candidates;
    it changes speed only, not results beyond float rounding). ``callback(step)`` runs
    after each step (1-based), e.g. for a progress bar. Groups without rows keep
    ``v = 0`` and ``alpha = 0``.
    """
    check_objective(objective)
    if n_groups < 1:
        raise ValueError("n_groups must be >= 1")
    if batch.n and int(batch.group.max()) >= n_groups:
        raise DataError(f"group index {int(batch.group.max())} >= n_groups={n_groups}")
    if steps < 0:
        raise ValueError("steps must be >= 0")
    n, k = batch.r.shape
    chunk = chunk_size or chunk_rows(k, batch.dim)
    s0 = None
    if objective == "grpo":
        s0 = np.empty((n, k), dtype=np.float32)
        for a in range(0, n, chunk):
            xs = batch.x[a:a + chunk]
            s0[a:a + chunk] = np.matmul(batch.z[a:a + chunk], xs[:, :, None])[:, :, 0] / TAU_S
    targets = make_targets(objective, batch.r, batch.mask, s0, tau_t=TAU_T)
    plans = _plan(batch, targets, chunk)
    adam = _Adam(n_groups, batch.dim, lr)
    acc = np.zeros_like(adam.v)
    trace = np.zeros(steps, dtype=np.float64)
    for step in range(steps):
        trace[step] = _step(plans, adam, acc)
        if callback is not None:
            callback(step + 1)
    v = adam.v
    row_loss = np.zeros(n, dtype=np.float64)
    for ch in plans:
        row_loss[ch.rows] = loss_and_grad(_forward(ch, v)[2], ch.t)[0]
    final = np.bincount(batch.group, weights=row_loss * batch.weight, minlength=n_groups)
    final += RIDGE * np.einsum("gd,gd->g", v, v, dtype=np.float64)
    n_g = np.bincount(batch.group, minlength=n_groups).astype(np.int64)
    return LearnResult(v, final, n_g, alpha_from_counts(n_g), trace,
                       hyperparameters(objective, steps, lr))
