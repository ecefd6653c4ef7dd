"""Adapted search against raw search on the same index and queries (goal: the adaptation
step <= 3% of the raw search).

Both paths start from the same encoded query vectors (encoding is identical and cached);
adapted search adds state lookup and ``unit(x + alpha v)`` for every query, then searches
the unchanged index. Alternating repeats, medians compared in one run.

    python benchmarks/bench_adapted_search.py [--data ../shared/data/scifact] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _support import DATA
from claims import Goal, emit

GOALS = {
    "apply": Goal("adapted search: adaptation step / raw search, worst scope", "<=", 0.03),
    "e2e": Goal("adapted search: end-to-end time / raw search, worst scope", "info", None),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA / "scifact")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--copies", type=int, default=10,
                    help="repeat the query set to make each search longer (less timer noise)")
    args = ap.parse_args()

    from tttembed import api
    from tttembed.adapt import make_groups
    from tttembed.adapt.state import AdaptState
    from tttembed.core.paths import cache_dir
    from tttembed.data.beir import load_task
    from tttembed.index.search import encode_queries
    from tttembed.ttt import adapted_search
    from tttembed.ttt.queries import QuerySet

    task = load_task(args.data, split="test")
    emb = api.load_embedder()
    idx = cache_dir() / "bench" / f"{task.name}-{task.fingerprint[:12]}"
    if not (idx / "CURRENT").exists():
        api.index_corpus(task.corpus, idx, embedder=emb, overwrite=True)
    index = api.open_index(idx, embedder=emb)
    base = QuerySet.from_tasks({task.name: task.queries})
    qs = QuerySet(base.tasks * args.copies,
                  tuple(f"{q}#{i}" for i in range(args.copies) for q in base.qids),
                  base.texts * args.copies)
    x = encode_queries(emb, list(base.texts))
    x = np.tile(x, (args.copies, 1))
    rng = np.random.default_rng(0)
    d = index.dim
    states = {}
    for scope in ("global", "task", "query"):
        g = make_groups(scope, list(qs.qids), list(qs.tasks), list(qs.texts))
        v = rng.standard_normal((len(g.keys), d)).astype(np.float32) * 0.05
        n = g.counts
        states[scope] = AdaptState(scope, tuple(g.keys), v, n / (n + 1.0), n,
                                   identity=index.identity, dim=d)
    times = {"raw": [], **{s: [] for s in states}}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        index.search(x, args.k)
        times["raw"].append(time.perf_counter() - t0)
        for scope, st in states.items():
            t0 = time.perf_counter()
            adapted_search(index, qs, x, [st], args.k)
            times[scope].append(time.perf_counter() - t0)
    # the adaptation step alone (state lookup + unit(x + alpha v)), timed in isolation:
    # on a busy machine the end-to-end difference is dominated by search-time noise
    from tttembed.adapt import query_keys
    from tttembed.adapt.apply import apply_states

    apply_t = {}
    for scope, st in states.items():
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            keys = {scope: query_keys(scope, list(qs.texts), list(qs.tasks))}
            apply_states(x, keys, [st])
            ts.append(time.perf_counter() - t0)
        apply_t[scope] = statistics.median(ts)
    raw = statistics.median(times["raw"])
    print(f"{len(qs)} queries ({len(base)} x {args.copies}) over {len(index)} docs, top {args.k}, "
          f"median of {args.repeats}")
    print(f"  raw search      : {raw * 1e3:8.1f} ms")
    for scope in states:
        t = statistics.median(times[scope])
        print(f"  adapted {scope:<7} : {t * 1e3:8.1f} ms  end-to-end overhead {t / raw - 1:+.1%}; "
              f"adaptation step alone {apply_t[scope] * 1e3:.1f} ms = "
              f"{apply_t[scope] / raw:.2%} of raw search (goal <= 3%)")
    emit(GOALS, {"apply": max(apply_t[s] / raw for s in states),
                 "e2e": max(statistics.median(times[s]) / raw for s in states)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
