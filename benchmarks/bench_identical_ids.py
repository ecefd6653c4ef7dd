"""Searching with BEIR's ``ignore_identical_ids`` against a plain search: the cost of
leaving each query's own document out (one result deeper from FAISS, then a stable
reorder of the (nq, k + 1) arrays), a ratio measured in one run.

Goal: a search that leaves the query's own document out within 1.10x of a plain search
of the same vectors (ArguAna's shape: 8,674 documents, 1,406 queries, dim 384, top 100).
With nothing to leave out (every other task) the two are the same call.

    python benchmarks/bench_identical_ids.py
    python benchmarks/bench_identical_ids.py --docs 8674 --queries 1406 --k 100 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from claims import Goal, emit

GOALS = {
    "search": Goal("search leaving the query's own document out / plain search", "<=", 1.10,
                   "x"),
}


def measure(n_docs: int, n_queries: int, d: int, k: int, repeats: int) -> dict[str, float]:
    import tempfile
    from pathlib import Path

    import tttembed.api as tt
    from tttembed.index.store import write_index

    rng = np.random.default_rng(0)
    docs = rng.normal(size=(n_docs, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory(prefix="bench-identical-") as tmp:
        write_index(Path(tmp) / "idx", [f"d{i}" for i in range(n_docs)], docs,
                    embedder_identity="bench:random", embedder_spec="bench:random",
                    corpus_fingerprint="bench")
        return _timed(tt.open_index(Path(tmp) / "idx"), docs, n_queries, k, repeats, rng)


def _timed(index: object, docs: np.ndarray, n_queries: int, k: int, repeats: int,
           rng: np.random.Generator) -> dict[str, float]:
    from tttembed.index.search import search_excluding

    n_docs, d = docs.shape
    own = rng.choice(n_docs, size=n_queries, replace=False)
    queries = docs[own] + rng.normal(size=(n_queries, d)).astype(np.float32) * 0.05
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    times: dict[str, list[float]] = {"plain": [], "excluding": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        index.search(queries, k)  # type: ignore[attr-defined]
        times["plain"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        search_excluding(index, queries, k, own.astype(np.int64))  # type: ignore[arg-type]
        times["excluding"].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=8674, help="Documents in the index.")
    ap.add_argument("--queries", type=int, default=1406, help="Queries, each near its own document.")
    ap.add_argument("--dim", type=int, default=384, help="Vector dimension.")
    ap.add_argument("--k", type=int, default=100, help="Results per query.")
    ap.add_argument("--repeats", type=int, default=7, help="Alternating repeats (medians).")
    args = ap.parse_args()
    med = measure(args.docs, args.queries, args.dim, args.k, args.repeats)
    print(f"plain search {med['plain'] * 1e3:.1f} ms, leaving the own document out "
          f"{med['excluding'] * 1e3:.1f} ms ({args.queries} queries, {args.docs} documents, "
          f"top {args.k}, median of {args.repeats})")
    emit(GOALS, {"search": med["excluding"] / med["plain"]})


if __name__ == "__main__":
    main()
