"""What choosing the query part's alpha out of sample adds to ``learn --method auto``: the
cross-validated learn of the query scope (each rewarded query's judged candidates in 5
folds, one batched problem; :func:`tttembed.ttt.choices.query_alphas`) against the rest
of method auto on the same rewards, a ratio measured in one run.

Goal: the choice adds at most half of what method auto took without it, with the loop's
parts (task, query; random unit vectors at SciFact's b = 10 shape by default: 5,183
documents, 300 rewarded queries, 10 judged candidates each, dim 384; rewards follow each
query's own direction). ``--scopes`` measures another choice of parts.

    python benchmarks/bench_query_alpha.py
    python benchmarks/bench_query_alpha.py --docs 5183 --queries 300 --depth 100 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from claims import Goal, emit

GOALS = {
    "share": Goal("query alpha choice / the rest of method auto (same rewards)", "<=", 0.5,
                  "x"),
}


class _Vectors:
    """An embedder of chosen vectors (text -> unit vector)."""

    spec = identity = "bench:table"
    options: dict = {}

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table, self.dim = table, len(next(iter(table.values())))

    def encode(self, texts: Sequence[str], kind: Literal["query", "document"] = "query",
               progress: Callable[[int], None] | None = None) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def _setup(tmp: Path, n_docs: int, n_queries: int, d: int, depth: int) -> tuple[Any, ...]:
    import tttembed.api as tt
    from tttembed.index.store import write_index
    from tttembed.ttt.queries import QuerySet, base_retrieval

    rng = np.random.default_rng(0)
    docs = rng.normal(size=(n_docs, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(n_docs)]
    write_index(tmp / "idx", ids, docs, embedder_identity="bench:table",
                embedder_spec="bench:table", corpus_fingerprint="bench")
    index = tt.open_index(tmp / "idx")
    x = docs[rng.choice(n_docs, n_queries, replace=False)] + rng.normal(
        size=(n_queries, d)).astype(np.float32) * 0.05
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    texts = [f"question {i}" for i in range(n_queries)]
    qs = QuerySet(("t",) * n_queries, tuple(f"q{i}" for i in range(n_queries)), tuple(texts))
    base = base_retrieval(index, _Vectors(dict(zip(texts, x))), qs, depth)
    direction = rng.normal(size=(n_queries, d)).astype(np.float32)
    reward = {key: {ids[r]: float(docs[r] @ direction[i]) for r in base.rows[i]}
              for i, key in enumerate(qs.keys)}
    for key, got in reward.items():  # each query's rewards on [0, 1]
        lo, hi = min(got.values()), max(got.values())
        reward[key] = {doc: (v - lo) / max(hi - lo, 1e-9) for doc, v in got.items()}
    by_id = {doc: i for i, doc in enumerate(ids)}
    row = {key: i for i, key in enumerate(qs.keys)}

    def pay(pairs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for key, doc in pairs:
            out.setdefault(key, {})[doc] = float(
                np.clip(0.5 + docs[by_id[doc]] @ direction[row[key]], 0.0, 1.0))
        return out

    return [(qs, base, index)], reward, pay


def measure(n_docs: int, n_queries: int, d: int, depth: int, repeats: int,
            scopes: tuple[str, ...] = ("task", "query")) -> dict[str, float]:
    import tttembed.ttt.select as select
    from tttembed.ttt.distil import learn_auto

    real = select.query_alphas
    times: dict[str, list[float]] = {"choice": [], "rest": []}
    with tempfile.TemporaryDirectory(prefix="bench-query-alpha-") as tmp:
        sources, rewards, pay = _setup(Path(tmp), n_docs, n_queries, d, depth)
        spent: list[float] = []

        def timed(*a: Any, **kw: Any) -> dict[str, str]:
            t0 = time.perf_counter()
            out = real(*a, **kw)
            spent.append(time.perf_counter() - t0)
            return out

        select.query_alphas = timed
        try:
            for _ in range(repeats):
                spent.clear()
                t0 = time.perf_counter()
                learn_auto(sources, rewards, pay, scopes=scopes)
                total = time.perf_counter() - t0
                times["choice"].append(sum(spent))
                times["rest"].append(total - sum(spent))
        finally:
            select.query_alphas = real
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5183, help="Documents in the index.")
    ap.add_argument("--queries", type=int, default=300, help="Rewarded queries (one task).")
    ap.add_argument("--depth", type=int, default=10, help="Judged candidates per query (b).")
    ap.add_argument("--dim", type=int, default=384, help="Vector dimension.")
    ap.add_argument("--repeats", type=int, default=3, help="Repeats (medians).")
    ap.add_argument("--scopes", default="task,query",
                    help="The parts method auto chooses from (default: the loop's, task,query; "
                         "learn's default is every scope).")
    args = ap.parse_args()
    med = measure(args.docs, args.queries, args.dim, args.depth, args.repeats,
                  tuple(args.scopes.split(",")))
    print(f"method auto without the choice {med['rest']:.2f} s, the query alpha choice "
          f"{med['choice']:.2f} s ({args.queries} queries x {args.depth} candidates, "
          f"{args.docs} documents, dim {args.dim}, scopes {args.scopes}, median of "
          f"{args.repeats})")
    emit(GOALS, {"share": med["choice"] / med["rest"]})


if __name__ == "__main__":
    main()
