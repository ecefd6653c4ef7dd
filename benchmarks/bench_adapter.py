"""Adapter and neighbour states against a task-wise state: learning cost and adapted search
latency, each a ratio measured in one run (issue 37's goals: an adapter learn within 2x of a
task-wise learn at b = 10 on SciFact; adapted search with an adapter state within 1.05x of a
task-wise state).

- learning: the optimizer alone on one reward table (SciFact's test queries, b = 10 pairs
  each, BM25-like random rewards when ``--synthetic``), task-wise ``learn_vectors`` vs the
  adapter's (the task-wise vectors, then its maps from them, as ``learn --scope adapter``
  does), alternating repeats, medians; with ``--data`` also end-to-end ``tt.learn`` (rewards
  from the qrels judge, already in the ledger after a warm-up run, ``folds=0``);
- search: the same query vectors adapted by each state, then the same index searched
  (end-to-end) and the adaptation step alone, alternating repeats, medians.

    python benchmarks/bench_adapter.py --synthetic          # shapes of SciFact, no data
    python benchmarks/bench_adapter.py --data ../shared/data/scifact
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from claims import Goal, emit

GOALS = {
    "learn": Goal("adapter learn / task-wise learn, the optimizer alone", "<=", 2.0, "x"),
    "learn_e2e": Goal("adapter learn / task-wise learn, end-to-end tt.learn (b = 10)", "<=",
                      2.0, "x"),
    "search": Goal("adapted search with an adapter state / with a task state", "<=", 1.05,
                   "x"),
    "search_nb": Goal("adapted search with a neighbour state / with a task state", "info",
                      None, "x"),
}


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def _median_ratio(fns: dict[str, object], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def learning(n: int, k: int, d: int, repeats: int) -> dict[str, float]:
    from tttembed.adapt import RewardBatch, learn_vectors
    from tttembed.adapt.adapter import learn_adapters

    rng = np.random.default_rng(0)
    x = _unit(rng.normal(size=(n, d)))
    z = _unit(x[:, None, :] + rng.normal(size=(n, k, d)) * 0.6)
    r = rng.uniform(size=(n, k))
    batch = RewardBatch(x, z, r, np.zeros(n, np.int64), np.full(n, 1.0 / n))

    def task() -> None:
        learn_vectors(batch, 1)

    def adapter() -> None:
        res = learn_vectors(batch, 1)
        learn_adapters(batch, 1, res.vectors)

    return _median_ratio({"task": task, "adapter": adapter}, repeats)


def search(n_docs: int, n_queries: int, d: int, k: int, repeats: int) -> dict[str, float]:
    import faiss

    from tttembed.adapt import AdaptState, apply_states
    from tttembed.adapt.apply import lookup_keys
    from tttembed.adapt.neighbour import neighbour_parts
    from tttembed.adapt.parts import StateParts
    from tttembed.adapt.scopes import query_key

    rng = np.random.default_rng(1)
    docs = _unit(rng.normal(size=(n_docs, d)))
    index = faiss.IndexFlatIP(d)
    index.add(docs)
    x = _unit(rng.normal(size=(n_queries, d)))
    texts = [f"q{i}" for i in range(n_queries)]
    tasks = ["t"] * n_queries
    v = rng.normal(size=(1, d)).astype(np.float32) * 0.05
    one = np.ones(1, np.int64)
    common = dict(identity="bench", dim=d)
    task = AdaptState("task", ("t",), v, np.full(1, 0.5), one, **common)
    u = rng.normal(size=(1, d, 8)).astype(np.float32) * 0.01
    adapter = AdaptState("adapter", ("t",), v, np.full(1, 0.5), one,
                         parts=StateParts(np.zeros(1, np.int64), u, u.copy()), **common)
    m = 300  # rewarded queries lending their vectors (SciFact's test set size)
    keys = tuple(query_key("t", f"rewarded {i}") for i in range(m))
    near = AdaptState("neighbour", keys, rng.normal(size=(m, d)).astype(np.float32) * 0.05,
                      np.full(m, 0.5), np.ones(m, np.int64),
                      parts=neighbour_parts(_unit(rng.normal(size=(m, d)))), **common)
    states = {"task": task, "adapter": adapter, "neighbour": near}

    def run(st: AdaptState, search_too: bool):
        def go() -> None:
            q = apply_states(x, lookup_keys([st], texts, tasks), [st])
            if search_too:
                index.search(q, k)
        return go

    e2e = _median_ratio({s: run(st, True) for s, st in states.items()}, repeats)
    step = _median_ratio({s: run(st, False) for s, st in states.items()}, repeats)
    return {**{f"search {s}": t for s, t in e2e.items()},
            **{f"apply {s}": t for s, t in step.items()}}


def end_to_end(data: Path, repeats: int) -> dict[str, float]:
    import tttembed.api as tt
    from tttembed.core.paths import cache_dir
    from tttembed.data.beir import load_task

    task = load_task(data, split="test")
    emb = tt.load_embedder()
    idx = cache_dir() / "bench" / f"{task.name}-{task.fingerprint[:12]}"
    if not (idx / "CURRENT").exists():
        tt.index_corpus(task.corpus, idx, embedder=emb, overwrite=True)
    index = tt.open_index(idx, embedder=emb)
    from tttembed.score.qrels import QrelsScorer

    scorer = QrelsScorer("labels", qrels=task.qrels)

    def learn(scope: str):
        def go() -> None:
            tt.learn(index, str(data), scorer=scorer, scope=scope, budget=10, folds=0,
                     embedder=emb, corpus=task.corpus)
        return go

    learn("task")()  # warm-up: rewards into the ledger, query vectors into the cache
    return _median_ratio({"learn task": learn("task"), "learn adapter": learn("adapter")},
                         repeats)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--queries", type=int, default=300, help="rewarded queries (learning)")
    ap.add_argument("--docs", type=int, default=5183, help="index size (search)")
    ap.add_argument("--requests", type=int, default=3000, help="queries searched at once")
    args = ap.parse_args()
    out = {}
    out.update(learning(args.queries, 10, 384, args.repeats))
    out.update(search(args.docs, args.requests, 384, min(100, args.docs), args.repeats))
    if args.data is not None and not args.synthetic:
        out.update(end_to_end(args.data, max(1, args.repeats // 2)))
    for name, t in out.items():
        print(f"  {name:<18}: {t * 1e3:9.1f} ms")
    print(f"learn: adapter / task = {out['adapter'] / out['task']:.2f} (goal <= 2)")
    if "learn adapter" in out:
        print(f"learn end-to-end: adapter / task = "
              f"{out['learn adapter'] / out['learn task']:.2f} (goal <= 2)")
    for s in ("adapter", "neighbour"):
        print(f"search {s} / task = {out[f'search {s}'] / out['search task']:.3f} "
              f"(goal <= 1.05); adaptation step {out[f'apply {s}'] * 1e3:.1f} ms vs task "
              f"{out['apply task'] * 1e3:.1f} ms")
    emit(GOALS, {"learn": out["adapter"] / out["task"],
                 "learn_e2e": (out["learn adapter"] / out["learn task"]
                               if "learn adapter" in out else None),
                 "search": out["search adapter"] / out["search task"],
                 "search_nb": out["search neighbour"] / out["search task"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
