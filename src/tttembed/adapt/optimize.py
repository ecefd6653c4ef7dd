"""Learn the vectors of every group of one scope as ONE batched problem.

Input is a :class:`RewardBatch`, the padded reward table of one scope: row ``q`` holds a
rewarded query's unit vector ``x_q``, its rewarded candidates' unit document vectors
``z_q`` (K, d), rewards ``r_q`` (K,) on [0, 1] (``nan`` = missing: dropped), a padding
mask, its group and its weight ``w_q``.

All groups at once. ``V`` (G, d) holds every group's vector; row ``q`` uses
``V[group[q]]``. The total ``sum_g L_g(v_g)`` is separable (group ``g``'s loss depends
on ``v_g`` only), so its gradient with respect to ``V[g]`` is exactly ``grad L_g``.
Adam is elementwise: moments, bias corrections and the step are per coordinate, with a
step count shared by all, so one Adam on the stacked ``V`` follows exactly the
trajectory of one Adam per group (tested against learning each group alone), and a
group's update may run as soon as its gradient is complete.

The hot path: numpy, float32, analytic gradients (tested against autograd), one BLAS
thread. Rows are taken in group order, in pieces of about :data:`CHUNK_BYTES` of
candidates. A piece computes ``z . u`` (one mat-vec pass), the objective's logit
gradient, then ``z^T dL/ds`` (the second pass) while the piece is still in cache, so
``z`` is read from memory about once per step. With ``u = x + v``, ``y = u / ||u||``,
``s = z . y / tau_S``: ``dL/du = z^T (dL/ds) / (tau_S ||u||) - c u`` with
``c = sum_i (dL/ds_i) s_i / ||u||^2`` (no extra pass). Pieces of one large group use
flat mat-vecs (``z . x`` is precomputed, so only ``z . v_g`` is needed); pieces of
small groups use batched mat-vecs and take those groups' Adam steps in cache. The step
has no Python loop over queries or groups, only over pieces; extra memory is
O(N K + G d). Deterministic: the same inputs give bit-identical vectors.

Query-wise groups (pieces whose rows are each their own group) depend on nothing
else, so they are not run step by step: each such piece (about :data:`SOLO_BYTES` of
candidates, it stays in cache) takes all its steps at once, on a few threads, before the step loop
of the shared groups (:func:`_solo_blocks`). The float operations per row are the same
as in the step-major loop (``block_queries=False``, the reference), so the vectors are
bit-identical; the Adam update of those blocks runs as one fused numba loop when numba
is installed (:mod:`tttembed.adapt.kernels`, also bit-identical). Only exact operation
order is safe: the KD and GRPO problems amplify float rounding (summing the same
dot products in another order moves 300-step vectors by up to ~1e-2).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt import kernels
from tttembed.adapt.batch import BETAS, EPS, LearnResult, RewardBatch, hyperparameters
from tttembed.adapt.objectives import (
    LR,
    RIDGE,
    STEPS,
    TAU_S,
    TAU_T,
    Targets,
    check_objective,
    loss_and_grad,
    make_targets,
)
from tttembed.adapt.scopes import alpha_from_counts
from tttembed.core.devices import cpu_threads, one_blas_thread
from tttembed.core.errors import DataError

#: Bytes of candidate vectors per chunk: large enough to amortise the per-chunk Python
#: overhead, small enough that the second pass over the chunk hits cache.
CHUNK_BYTES = 2 << 20
#: Bytes of candidates per block of one-query groups: all steps of a block run while it
#: stays in the L2/L3 cache; bigger blocks amortise numpy's per-call overhead.
SOLO_BYTES = 8 << 20


def chunk_rows(k: int, d: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Queries per chunk so that a chunk of candidates takes about ``chunk_bytes``."""
    return max(1, int(chunk_bytes) // max(1, 4 * k * d))


#: Rows of a matrix: a slice or an index array.
RowSelector = slice | np.ndarray


@dataclass(frozen=True, eq=False)
class _Piece:
    """A run of consecutive (group-sorted) rows and how to treat them in a step.

    Single-group pieces (``group`` set) use plain mat-vecs over the flattened candidates
    and accumulate the group's gradient; batched pieces hold whole small groups
    (``ids``: their groups, ``gather``: each row's group, ``starts``: segment starts for
    the reduction, None when every row is its own group)."""

    rows: slice
    x: np.ndarray
    xx: np.ndarray          # (C,) ||x_q||^2
    b: np.ndarray           # (C, K) base cosines z . x
    z: np.ndarray
    t: Targets
    w: np.ndarray           # (C,) query weights
    wt: np.ndarray          # (C, 1) w / tau_S
    group: int | None = None
    last: bool = False
    ids: RowSelector | None = None
    gather: RowSelector | None = None
    starts: np.ndarray | None = None


def _as_index(ids: np.ndarray) -> RowSelector:
    """A slice when ``ids`` is a consecutive increasing range (cheap views), else ids."""
    if ids.size and np.all(np.diff(ids) == 1):
        return slice(int(ids[0]), int(ids[-1]) + 1)
    return ids


def _pieces(x, z, base, targets, weight, group, chunk, solo_chunk=None) -> list[_Piece]:
    """Cut the group-sorted rows into pieces of about ``chunk`` rows (setup, not per step);
    runs of one-query groups into pieces of ``solo_chunk`` rows (default ``chunk``)."""
    n = len(group)
    seg = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if n else np.zeros(0, int)
    lens = np.diff(np.r_[seg, n])
    big = lens >= max(2, chunk // 4)
    xx = np.einsum("nd,nd->n", x, x)
    wt = (weight / TAU_S).astype(np.float32)[:, None]
    w = weight.astype(np.float32)

    def piece(a: int, b: int, **kw: Any) -> _Piece:
        return _Piece(slice(a, b), x[a:b], xx[a:b], base[a:b], z[a:b], targets.rows(a, b),
                      w[a:b], wt[a:b], **kw)

    out: list[_Piece] = []
    small_runs: list[np.ndarray] = []   # runs of consecutive small segments
    run_start = 0
    for i in np.flatnonzero(big).tolist() + [len(seg)]:
        if i > run_start:
            small_runs.append(np.arange(run_start, i))
        run_start = i + 1
        if i == len(seg):
            break
        a, ln = int(seg[i]), int(lens[i])
        cuts = np.linspace(a, a + ln, -(-ln // chunk) + 1).round().astype(int)
        for j, (p, q) in enumerate(itertools.pairwise(cuts)):
            out.append(piece(int(p), int(q), group=int(group[a]), last=j == len(cuts) - 2))
    for run in small_runs:
        offset = seg[run] - seg[run[0]]
        size = solo_chunk if solo_chunk and lens[run].max() == 1 else chunk
        for part in np.split(run, np.flatnonzero(np.diff(offset // size)) + 1):
            a, b = int(seg[part[0]]), int(seg[part[-1]] + lens[part[-1]])
            gids = group[seg[part]]
            if b - a == len(part):  # every row its own group
                out.append(piece(a, b, ids=_as_index(gids), gather=_as_index(gids)))
            else:
                out.append(piece(a, b, ids=gids, gather=group[a:b], starts=seg[part] - a))
    out.sort(key=lambda p: p.rows.start)
    return out


class _Adam:
    """Adam (PyTorch's update, float32) on rows of V; a step count shared by all rows."""

    def __init__(self, g: int, d: int, lr: float, fused: bool = False) -> None:
        self.v = np.zeros((g, d), dtype=np.float32)
        self.m = np.zeros_like(self.v)
        self.s = np.zeros_like(self.v)
        self.lr, self.t = lr, 0
        self.fused: Any = kernels.adam_kernel() if fused else None

    def next_step(self) -> None:
        self.t += 1
        self.step_size = self.lr / (1.0 - BETAS[0] ** self.t)
        self.bc2_sqrt = math.sqrt(1.0 - BETAS[1] ** self.t)

    def update(self, ids: RowSelector, grad: np.ndarray) -> float:
        """Step rows ``ids`` with loss gradient ``grad`` (+ the ridge gradient ``2 lambda v``).

        ``grad`` is overwritten. Returns ``ridge * ||v||^2`` of the rows before the step."""
        v, m, s = self.v[ids], self.m[ids], self.s[ids]
        ridge = RIDGE * float(np.vdot(v, v))
        if self.fused is not None and isinstance(ids, slice):  # contiguous rows
            c = kernels.constants(RIDGE, BETAS, 1.0 / (self.bc2_sqrt * self.step_size),
                                  EPS / self.step_size)
            self.fused(v.reshape(-1), m.reshape(-1), s.reshape(-1), grad.reshape(-1), c)
            return ridge
        buf = np.multiply(v, 2.0 * RIDGE)
        grad += buf
        m *= BETAS[0]
        m += np.multiply(grad, 1.0 - BETAS[0], out=buf)
        grad *= grad
        grad *= 1.0 - BETAS[1]
        s *= BETAS[1]
        s += grad
        # v -= step_size * m / (sqrt(s) / bc2_sqrt + eps), in one buffer
        np.sqrt(s, out=buf)
        buf *= 1.0 / (self.bc2_sqrt * self.step_size)
        buf += EPS / self.step_size
        np.divide(m, buf, out=buf)
        v -= buf
        if not isinstance(ids, slice):
            self.v[ids], self.m[ids], self.s[ids] = v, m, s
        return ridge


def _logits(pc: _Piece, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(v_g or the rows' u = x + v, ||u||, logits)`` of a piece for the vectors ``v``."""
    if pc.group is not None:
        vg = v[pc.group]
        s = (pc.z.reshape(-1, vg.shape[0]) @ vg).reshape(pc.b.shape)
        s += pc.b
        nrm = pc.xx + 2.0 * (pc.x @ vg) + float(np.dot(vg, vg))
        nrm = np.sqrt(nrm, out=nrm)
        s *= (1.0 / TAU_S / nrm)[:, None]
        return vg, nrm, s
    u = pc.x + v[pc.gather]
    nrm = np.sqrt(np.matmul(u[:, None, :], u[:, :, None]).reshape(-1))
    s = np.matmul(pc.z, u[:, :, None])[:, :, 0]
    s *= (1.0 / TAU_S / nrm)[:, None]
    return u, nrm, s


def _piece_step(pc: _Piece, adam: _Adam, acc: np.ndarray | None) -> tuple[float, float]:
    """One piece's share of a step: ``(sum_q w_q loss_q, ridge of the rows it updates)``."""
    vu, nrm, s = _logits(pc, adam.v)
    loss, gs = loss_and_grad(s, pc.t)
    lsum = float(np.dot(loss, pc.w))
    nrm = nrm[:, None]
    gs *= pc.wt / nrm                 # dL/ds * w / tau / ||u||
    c = np.einsum("ck,ck->c", gs, s)  # dL/du = z^T gs - c u,  c = tau sum gs s / ||u||
    c *= TAU_S / nrm[:, 0]
    if pc.group is not None:
        assert acc is not None
        g = pc.group
        red = gs.reshape(-1) @ pc.z.reshape(len(gs) * gs.shape[1], -1)
        red -= c @ pc.x
        red -= float(c.sum()) * vu
        acc[g] += red
        if not pc.last:
            return lsum, 0.0
        ridge = adam.update(slice(g, g + 1), acc[g:g + 1])
        acc[g] = 0.0
        return lsum, ridge
    gu = np.matmul(gs[:, None, :], pc.z)[:, 0, :]
    vu *= c[:, None]
    gu -= vu
    red = gu if pc.starts is None else np.add.reduceat(gu, pc.starts, axis=0)
    return lsum, adam.update(pc.ids, red)  # type: ignore[arg-type]


def _step(pieces: list[_Piece], adam: _Adam, acc: np.ndarray,
          done: dict[int, np.ndarray] | None = None, step: int = 0) -> float:
    """One full-batch Adam step over every group; returns the total loss before it.

    ``done`` maps the index of a piece already learned by :func:`_solo_block` to its
    per-step ``(loss, ridge)`` terms; those are only added to the total (in piece order)."""
    adam.next_step()
    total = 0.0
    for i, pc in enumerate(pieces):
        if done is not None and i in done:
            lsum, ridge = done[i][step]
        else:
            lsum, ridge = _piece_step(pc, adam, acc)
        total += lsum
        total += ridge
    return total


def _solo_block(pc: _Piece, adam: _Adam, steps: int, fused: bool = False) -> np.ndarray:
    """Every step of a piece whose rows are each their own group, while it sits in cache.

    The rows' vectors depend on nothing else, so running all steps of this piece before
    the next one does the same float operations as the step-major loop: the vectors and
    Adam moments written back to ``adam`` are bit-identical (``fused``: the Adam update
    in one numba loop, the same operations). Returns (steps, 2) terms."""
    local = _Adam(len(pc.w), adam.v.shape[1], adam.lr, fused=fused)
    own = dataclasses.replace(pc, ids=slice(None), gather=slice(None))
    out = np.zeros((steps, 2), dtype=np.float64)
    for step in range(steps):
        local.next_step()
        out[step] = _piece_step(own, local, None)
    adam.v[pc.ids], adam.m[pc.ids], adam.s[pc.ids] = local.v, local.m, local.s
    return out


def _solo_blocks(pieces: list[_Piece], adam: _Adam, steps: int,
                 callback: Callable[[int], None] | None, threads: int = 1,
                 fused: bool = False) -> dict[int, np.ndarray]:
    """Learn every piece of one-query groups block by block (see :func:`_solo_block`)
    ahead of the step loop, on ``threads`` threads (blocks are independent and write
    disjoint rows, so the result does not depend on it). When those are all the pieces,
    ``callback`` sees steps 1..steps in proportion to the blocks done."""
    solo = [i for i, pc in enumerate(pieces) if pc.group is None and pc.starts is None]
    report = callback if len(solo) == len(pieces) else None
    done: dict[int, np.ndarray] = {}
    shown = 0
    if fused and solo:
        kernels.adam_kernel()  # load / compile once, before the threads
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        jobs = [pool.submit(_solo_block, pieces[i], adam, steps, fused) for i in solo]
        for j, (i, job) in enumerate(zip(solo, jobs)):
            done[i] = job.result()
            while report is not None and shown < steps * (j + 1) // len(solo):
                shown += 1
                report(shown)
    return done


def _check_args(batch: RewardBatch, n_groups: int, objective: str, steps: int) -> None:
    check_objective(objective)
    if n_groups < 1:
        raise ValueError("n_groups must be >= 1")
    if batch.n and int(batch.group.max()) >= n_groups:
        raise DataError(f"group index {int(batch.group.max())} >= n_groups={n_groups}")
    if steps < 0:
        raise ValueError("steps must be >= 0")


def _setup(objective: str, x: np.ndarray, z: np.ndarray, r: np.ndarray, mask: np.ndarray,
           group: np.ndarray, weight: np.ndarray, chunk: int, solo_chunk: int | None = None
           ) -> list[_Piece]:
    """Base cosines, the objective's targets and the pieces of the group-sorted rows."""
    n, k = r.shape
    base = np.empty((n, k), dtype=np.float32)
    for a in range(0, n, chunk):
        base[a:a + chunk] = np.matmul(z[a:a + chunk], x[a:a + chunk, :, None])[:, :, 0]
    s0 = None
    if objective == "grpo":
        s0 = base / (TAU_S * np.sqrt(np.einsum("nd,nd->n", x, x)))[:, None]
    targets = make_targets(objective, r, mask, s0, tau_t=TAU_T)
    return _pieces(x, z, base, targets, weight, group, chunk, solo_chunk)


def learn_vectors(
    batch: RewardBatch,
    n_groups: int,
    objective: str = "kd",
    *,
    steps: int = STEPS,
    lr: float = LR,
    chunk_size: int | None = None,
    callback: Callable[[int], None] | None = None,
    block_queries: bool = True,
    threads: int | None = None,
    fused: bool = True,
) -> LearnResult:
    """Minimise ``L_g(v) = sum_{q in g} w_q loss_q(v) + 0.3 ||v||^2`` for every group.

    From ``v = 0``: ``steps`` full-batch Adam steps (lr ``lr``, betas (0.9, 0.999),
    eps 1e-8). ``chunk_size`` = queries per chunk (default: about :data:`CHUNK_BYTES` of
    candidates; it changes speed, not results beyond float rounding). ``callback(step)``
    runs after each step (1-based), e.g. for a progress bar. Groups without rows keep
    ``v = 0`` and ``alpha = 0``. Rows are processed in group order: when ``batch`` is not
    sorted by group, a sorted copy of its candidate tensor is made once (build the table
    in ``Groups.order()`` to avoid that copy). ``block_queries=False`` runs every piece
    step by step (the reference path; the default takes all steps of each block of
    one-query groups while it sits in cache, on ``threads`` threads (default
    :func:`tttembed.core.devices.cpu_threads`), with the fused numba Adam when numba is installed and
    ``fused``, and gives bit-identical vectors).
    """
    _check_args(batch, n_groups, objective, steps)
    n, k = batch.r.shape
    chunk = chunk_size or chunk_rows(k, batch.dim)
    x, z, r, mask, group, weight = (batch.x, batch.z, batch.r, batch.mask, batch.group,
                                    batch.weight)
    if n and np.any(np.diff(group) < 0):
        order = np.argsort(group, kind="stable")
        x, z, r, mask, group, weight = (a[order] for a in (x, z, r, mask, group, weight))  # type: ignore[index]
    trace = np.zeros(steps, dtype=np.float64)
    with one_blas_thread():
        adam = _Adam(n_groups, batch.dim, lr)
        solo = (chunk_size or chunk_rows(k, batch.dim, SOLO_BYTES)) if block_queries else None
        pieces = _setup(objective, x, z, r, mask, group, weight, chunk,  # type: ignore[arg-type]
                        solo)
        acc = np.zeros_like(adam.v)
        done = {}
        if block_queries:
            done = _solo_blocks(pieces, adam, steps, callback, threads or cpu_threads(),
                                fused)
        for step in range(steps):
            trace[step] = _step(pieces, adam, acc, done, step)
            if callback is not None and (not done or len(done) < len(pieces)):
                callback(step + 1)
        v = adam.v
        row_loss = np.zeros(n, dtype=np.float64)
        for pc in pieces:
            row_loss[pc.rows] = loss_and_grad(_logits(pc, v)[2], pc.t)[0]
    final = np.bincount(group, weights=row_loss * weight, minlength=n_groups)
    final += RIDGE * np.einsum("gd,gd->g", v, v, dtype=np.float64)
    n_g = np.bincount(group, minlength=n_groups).astype(np.int64)
    return LearnResult(v, final, n_g, alpha_from_counts(n_g), trace,
                       hyperparameters(objective, steps, lr))
