"""How fast is the batched optimizer? Ratios measured in one run.

    python benchmarks/bench_optimizer.py [--n 12263 --k 10 --d 1024 --steps 300]

For each scope (global; task with --tasks tasks; query) it times ``learn_vectors`` on a
synthetic reward table of N queries x K candidates x d dims and prints:

- the memory-traffic bound: ``steps * 2 passes * bytes(z) / bandwidth``, where the read
  bandwidth is measured in this run by big reductions (numpy and torch, best of a few)
  over the candidate tensor itself; goal: time / bound <= 1.5;
- the speedup over a per-query Python loop of the same math, the way ReFIT/TouR-style
  tools run (torch autograd + one small Adam per query, 300 steps each),
  and, for the shared scopes, over a loop over queries inside each step that
  accumulates the shared vector's gradient. Both loops are timed on a sample of
  --loop-sample queries and EXTRAPOLATED to N.

The table is built in group order (``Groups.order()``), as the library's callers do.

Query-wise groups are learned block by block, all steps of a block while it sits in
cache (``--threads`` threads; bit-identical to the step-major path, which
``--reference`` times instead). After the table: the optimizer's own peak memory
(tracemalloc, beyond the reward table) and the process's peak RSS. The goals are
:data:`GOALS`; the query-scope time is scaled linearly to the goal's size
(N = 12,263, 300 steps) when run smaller (the query scope is linear in N x steps).

With ``--crossval`` it also times the reward cross-validation of each scope
(:func:`tttembed.adapt.crossval.cross_validate`, K = 5 folds learned as one batched problem,
then scored) and prints its cost as a multiple of that scope's single learn; goal <= 5x.

The default run takes a few minutes on 2 cores; use --n 2000 for a quick look.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np
from claims import Goal, emit

from tttembed.adapt import RewardBatch, learn_vectors, make_groups
from tttembed.adapt.crossval import FOLDS, cross_validate
from tttembed.adapt.objectives import RIDGE, TAU_S, TAU_T

GOAL_N, GOAL_STEPS = 12263, 300
GOALS = {
    "query_s": Goal("optimizer: query scope, N=12,263 K=10 d=1024, 300 steps", "<=", 10.0, " s"),
    "query_x": Goal("optimizer: query scope speedup over the per-query loop", ">=", 200.0, "x"),
    "shared_bound": Goal("optimizer: shared scopes, time / memory-traffic bound", "<=", 1.5),
    "k100_s": Goal("optimizer: query scope, N=12,263 K=100 d=1024, 300 steps", "info", None,
                   " s"),
    "k100_mem": Goal("optimizer: query scope K=100, optimizer peak memory beyond the table",
                     "info", None, " GiB"),
    "cv_x": Goal(f"reward cross-validation, K = {FOLDS} folds: time / one learn (worst scope)",
                 "<=", 5.0, "x"),
}


def synthetic(n: int, k: int, d: int, n_tasks: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = np.empty((n, k, d), dtype=np.float32)
    for a in range(0, n, 1024):  # unit neighbours of the query, cosine about 0.4
        zc = rng.standard_normal((min(1024, n - a), k, d), dtype=np.float32)
        zc += (0.44 * np.sqrt(d)) * x[a:a + 1024, None, :]
        zc /= np.linalg.norm(zc, axis=2, keepdims=True)
        z[a:a + 1024] = zc
    r = rng.uniform(size=(n, k))
    sizes = rng.integers(43, 1596, size=n_tasks).astype(float)
    tasks = [f"task{t:02d}" for t in rng.choice(n_tasks, size=n, p=sizes / sizes.sum())]
    qids = [str(i) for i in range(n)]
    return x, z, r, tasks, qids


def bandwidth(z: np.ndarray) -> float:
    """Read bandwidth (bytes/s): best of numpy and torch full reductions over ``z``."""
    import torch

    flat = z.reshape(-1)
    zt = torch.from_numpy(flat)
    best = 0.0
    for f in (lambda: np.add.reduce(flat), lambda: zt.sum()) * 3:
        t0 = time.perf_counter()
        f()
        best = max(best, z.nbytes / (time.perf_counter() - t0))
    return best


def loop_query_time(x, z, r, sample: np.ndarray, steps: int) -> float:
    """ReFIT/TouR style: for each query its own vector and Adam, autograd, `steps` steps."""
    import torch

    t0 = time.perf_counter()
    for q in sample:
        xq, zq = torch.from_numpy(x[q]), torch.from_numpy(z[q])
        p = torch.softmax(torch.from_numpy(r[q]).float() / TAU_T, 0)
        v = torch.zeros_like(xq, requires_grad=True)
        opt = torch.optim.Adam([v], lr=0.01)
        for _ in range(steps):
            opt.zero_grad()
            s = zq @ torch.nn.functional.normalize(xq + v, dim=0) / TAU_S
            loss = torch.sum(p * (p.log() - torch.log_softmax(s, 0))) + RIDGE * v.dot(v)
            loss.backward()
            opt.step()
    return time.perf_counter() - t0


def loop_shared_time(x, z, r, sample: np.ndarray, steps: int) -> float:
    """Shared vector, loop over queries inside each step accumulating the gradient."""
    import torch

    t0 = time.perf_counter()
    v = torch.zeros(x.shape[1], requires_grad=True)
    opt = torch.optim.Adam([v], lr=0.01)
    w = 1.0 / len(sample)
    data = [(torch.from_numpy(x[q]), torch.from_numpy(z[q]),
             torch.softmax(torch.from_numpy(r[q]).float() / TAU_T, 0)) for q in sample]
    for _ in range(steps):
        opt.zero_grad()
        for xq, zq, p in data:
            s = zq @ torch.nn.functional.normalize(xq + v, dim=0) / TAU_S
            (w * torch.sum(p * (p.log() - torch.log_softmax(s, 0)))).backward()
        (RIDGE * v.dot(v)).backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=12263)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--tasks", type=int, default=15)
    ap.add_argument("--loop-sample", type=int, default=50)
    ap.add_argument("--objective", default="kd", choices=["kd", "rkl", "grpo"])
    ap.add_argument("--chunk-size", type=int, default=None, help="queries per chunk")
    ap.add_argument("--scopes", default="global,task,query")
    ap.add_argument("--threads", type=int, default=None, help="threads for query blocks")
    ap.add_argument("--peak-memory", action="store_true",
                    help="trace the optimizer's peak memory (tracemalloc; on for K >= 100)")
    ap.add_argument("--reference", action="store_true",
                    help="time the step-major reference path instead of query blocks")
    ap.add_argument("--vs-reference", action="store_true",
                    help="also time the reference path on the query scope, in this run, "
                         "and check that the vectors are bit-identical")
    ap.add_argument("--crossval", action="store_true",
                    help=f"also time the {FOLDS}-fold reward cross-validation of each scope")
    args = ap.parse_args()
    n, k, d, steps = args.n, args.k, args.d, args.steps

    x, z, r, tasks, qids = synthetic(n, k, d, args.tasks)
    print(f"N={n} K={k} d={d} steps={steps} objective={args.objective}: "
          f"z = {z.nbytes / 2**20:.0f} MiB; bound = {steps} steps x 2 passes over z / read "
          "bandwidth measured just before each scope")

    sample = np.random.default_rng(1).choice(n, size=min(args.loop_sample, n), replace=False)
    loop_query_time(x, z, r, sample[:2], 5)  # warm up torch (first autograd/Adam calls)
    loop_shared_time(x, z, r, sample[:2], 5)
    t_own = loop_query_time(x, z, r, sample, steps) * n / len(sample)
    t_shared = loop_shared_time(x, z, r, sample, steps) * n / len(sample)
    print(f"Python loops of the same math, EXTRAPOLATED from {len(sample)} queries to {n}: "
          f"per-query vector + Adam (ReFIT/TouR style) {t_own:.0f} s; "
          f"shared vector, loop over queries per step {t_shared:.0f} s")

    print(f"{'scope':<7} {'groups':>6} {'GB/s':>5} {'time s':>7} {'bound s':>7} "
          f"{'time/bound':>10} {'x per-query loop':>17} {'x shared loop':>14}")
    times: dict[str, tuple[float, float]] = {}
    cv_times: dict[str, float] = {}
    after = ""
    peak = 0
    trace_memory = args.peak_memory or k >= 100
    # synthetic queries: each one's id is its text (the query scope groups by text)
    warm = make_groups("query", qids[:4], tasks[:4], qids[:4])  # warm up numba / first calls
    learn_vectors(RewardBatch(x[:4], z[:4], r[:4], warm.index, warm.weights), 4, steps=2)
    for scope in args.scopes.split(","):
        groups = make_groups(scope, qids, tasks, qids)
        order = groups.order()
        same = bool(np.array_equal(order, np.arange(n)))  # no copy of z when already in order
        batch = RewardBatch(x if same else x[order], z if same else z[order],
                            r if same else r[order], groups.index[order], groups.weights[order])
        bw = bandwidth(batch.z)
        bound = steps * 2 * z.nbytes / bw
        if trace_memory:
            tracemalloc.start()
        t0 = time.perf_counter()
        res = learn_vectors(batch, len(groups.keys), args.objective, steps=steps,
                            chunk_size=args.chunk_size, threads=args.threads,
                            block_queries=not args.reference)
        t = time.perf_counter() - t0
        if trace_memory:
            peak = max(peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        assert np.isfinite(res.vectors).all()
        times[scope] = (t, bound)
        if args.vs_reference and scope == "query" and not args.reference:
            t0 = time.perf_counter()
            ref = learn_vectors(batch, len(groups.keys), args.objective, steps=steps,
                                chunk_size=args.chunk_size, block_queries=False)
            t_ref = time.perf_counter() - t0
            after = (f"(query scope, step-major reference path in this run: {t_ref:.1f} s = "
                     f"{t_ref / t:.2f}x the blocks; vectors bit-identical: "
                     f"{np.array_equal(ref.vectors, res.vectors)})")
            del ref
        shared = "-" if scope == "query" else f"{t_shared / t:.0f}x"
        print(f"{scope:<7} {len(groups.keys):>6} {bw / 1e9:>5.1f} {t:>7.1f} {bound:>7.1f} "
              f"{t / bound:>10.2f} {t_own / t:>16.0f}x {shared:>14}", flush=True)
        del batch, res
        if args.crossval:
            t0 = time.perf_counter()
            cv = cross_validate(x, list(z), list(r), qids, tasks, scope, objective=args.objective)
            cv_times[scope] = time.perf_counter() - t0
            print(f"{'':<7} reward cross-validation ({FOLDS} folds, {cv.queries} queries "
                  f"scored): {cv_times[scope]:.1f} s = {cv_times[scope] / t:.2f}x one learn",
                  flush=True)
    if after:
        print(after)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    traced = f"{peak / 2**30:.2f} GiB" if trace_memory else "not traced (--peak-memory)"
    print(f"optimizer peak memory beyond the table (tracemalloc): {traced}; "
          f"process peak RSS {rss:.2f} GiB (z = {z.nbytes / 2**30:.2f} GiB)")
    measured = claims(times, t_own, n, k, steps, peak)
    if cv_times:
        measured["cv_x"] = max(cv_times[s] / times[s][0] for s in cv_times)
    emit(GOALS, measured, note=f"run at N={n}, {steps} steps"
         if (n, steps) != (GOAL_N, GOAL_STEPS) else "")


def claims(times, t_own, n, k, steps, peak) -> dict[str, float]:
    """The measured values of :data:`GOALS` (query time scaled to N = 12,263, 300 steps)."""
    out: dict[str, float] = {}
    scale = GOAL_N * GOAL_STEPS / (n * steps)
    if "query" in times and k == 10:
        out["query_s"] = times["query"][0] * scale
        out["query_x"] = t_own / times["query"][0]
    elif "query" in times and k == 100:
        out["k100_s"] = times["query"][0] * scale
        out["k100_mem"] = peak / 2**30
    shared = [t / b for s, (t, b) in times.items() if s != "query"]
    if shared and k == 10:
        out["shared_bound"] = max(shared)
    return out


if __name__ == "__main__":
    main()
