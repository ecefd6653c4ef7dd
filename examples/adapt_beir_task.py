"""Adapt one BEIR task's queries with rewards, and compare every scope on the same pairs.

    python examples/adapt_beir_task.py data/scifact --scorer bm25 --budget 10
    python examples/adapt_beir_task.py data/scifact --scorer qrels:data/scifact/qrels/train.tsv \\
        --learn-split train --eval-split test --scopes task

With ``--learn-split`` = ``--eval-split`` (default ``test``), rewards are paid on the very
queries that are evaluated (the fixed-population protocol: only use a scorer that never
saw the labels, e.g. ``bm25`` or a reranker). With different splits it is a leak-free
transfer: states learned on one split's queries are applied to the other's.

Prints nDCG@10 for raw search, direct reranking (same pairs; only for the fixed
population) and the adapted searches. Rewards are paid once: the ledger serves every
scope after the first. Uses only the public API, ``tttembed.api``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import tttembed.api as tt
from tttembed.types import SCOPES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="BEIR folder")
    ap.add_argument("--scorer", default="bm25", help="reward scorer spec")
    ap.add_argument("--budget", type=float, default=10.0, help="rewards per query (b)")
    ap.add_argument("--learn-split", default="test", help="split whose queries are rewarded")
    ap.add_argument("--eval-split", default="test", help="split whose queries are evaluated")
    ap.add_argument("--scopes", default=",".join(SCOPES), help="comma-separated scopes")
    ap.add_argument("--index", type=Path, default=None,
                    help="index folder (default: idx/<data name>, built when absent)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    idx = args.index or Path("idx") / args.data.name
    index = tt.open_index(idx) if idx.exists() else tt.index_corpus(args.data, idx)
    task = args.data.name
    scorer = tt.load_scorer(args.scorer, index=index, corpus=args.data)
    evaluated = tt.search(index, args.data, split=args.eval_split, task=task)
    qrels = evaluated.qrels[task]
    raw = tt.per_query_metric(qrels, evaluated.to_run())
    rows = [("raw", raw)]
    if args.learn_split == args.eval_split:
        rr = tt.rerank(index, args.data, scorer=scorer, budget=args.budget, split=args.eval_split)
        rows.append(("direct rerank", tt.per_query_metric(qrels, rr.to_run())))
    pairs = {}
    for scope in args.scopes.split(","):
        state = tt.learn(index, args.data, scorer=scorer, scope=scope, budget=args.budget,
                         split=args.learn_split, task=task)
        pairs[scope] = state.pairs
        adapted = tt.search(index, args.data, split=args.eval_split, task=task, states=[state])
        rows.append((f"TTT-Embed {scope}-wise", tt.per_query_metric(qrels, adapted.to_run())))
    print(f"task {task}: learn on {args.learn_split}, evaluate on {args.eval_split} "
          f"({len(raw)} judged queries); scorer {args.scorer}; b = {args.budget:g}; pairs "
          + "; ".join(f"{s}: {p}" for s, p in pairs.items()))
    print(f"{'method':<24}{'nDCG@10':>9}{'delta':>9}{'p (vs raw)':>12}  95% CI of delta")
    for label, per_q in rows:
        mean = sum(per_q.values()) / len(per_q)
        if label == "raw":
            print(f"{label:<24}{mean:9.4f}")
            continue
        c = tt.compare(per_q, raw)
        print(f"{label:<24}{mean:9.4f}{c.delta:+9.4f}{c.p_value:12.4f}  "
              f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]")
    print(f"time: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
