"""Adapt one BEIR task's queries with rewards, and compare every scope on the same pairs.

    python examples/adapt_beir_task.py ../shared/data/scifact --scorer bm25 --budget 10
    python examples/adapt_beir_task.py ../shared/data/scifact --scorer qrels:../shared/data/scifact/qrels/train.tsv \
        --learn-split train --eval-split test --scopes task

With ``--learn-split`` = ``--eval-split`` (default ``test``), rewards are paid on the very
queries that are evaluated (the fixed-population protocol: only use a scorer that never
saw the labels, e.g. ``bm25`` or a reranker). With different splits it is a leak-free
transfer: states learned on one split's queries are applied to the other's.

Prints nDCG@10 for raw search, direct reranking (same pairs; only for the fixed
population) and the adapted searches, one scoring pass for all scopes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tttembed import api
from tttembed.adapt.scopes import SCOPES
from tttembed.data.beir import load_task
from tttembed.evaluate.metrics import evaluate_per_query
from tttembed.evaluate.stats import compare
from tttembed.ttt.learn import (
    adapted_search,
    build_scorer,
    candidate_depth,
    learn_from_rewards,
    make_plan,
    rerank_runs,
)
from tttembed.core.paths import cache_dir
from tttembed.ttt.queries import QuerySet, base_retrieval, run_from_arrays, score_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--scorer", default="bm25")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--learn-split", default="test")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--scopes", default=",".join(SCOPES))
    ap.add_argument("--objective", default="kd")
    args = ap.parse_args()

    t0 = time.perf_counter()
    learn_task = load_task(args.data, split=args.learn_split)
    eval_task = load_task(args.data, split=args.eval_split)
    name = learn_task.name
    emb = api.load_embedder()
    idx_dir = cache_dir() / "examples" / f"{name}-{learn_task.fingerprint()[:12]}"
    if not (idx_dir / "manifest.json").exists():
        api.index_corpus(learn_task.corpus, idx_dir, embedder=emb, overwrite=True)
    index = api.open_index(idx_dir, embedder=emb)
    fixed = args.learn_split == args.eval_split

    lq = QuerySet.from_tasks({name: learn_task.queries})
    eq = QuerySet.from_tasks({name: eval_task.queries})
    k = max(100, candidate_depth(args.budget, args.depth, len(index)))
    lbase = base_retrieval(index, emb, lq, k)
    ebase = lbase if fixed else base_retrieval(index, emb, eq, 100)
    plan = make_plan(lq, lbase, index, args.budget, args.depth)
    scorer = build_scorer(args.scorer, learn_task.corpus)
    t1 = time.perf_counter()
    rewards = score_pairs(plan.pairs, lq, learn_task.corpus, scorer)
    t2 = time.perf_counter()
    qrels = eval_task.qrels

    def ndcg(run):
        return evaluate_per_query(qrels, run, ("ndcg@10",))["ndcg@10"]

    raw = ndcg(run_from_arrays(eq, index, ebase.rows[:, :100], ebase.scores[:, :100])[name])
    rows = [("raw", raw)]
    if fixed:
        rows.append(("direct rerank", ndcg(rerank_runs(eq, index, ebase, rewards)[name])))
    timings = {}
    for scope in args.scopes.split(","):
        ts = time.perf_counter()
        state, _ = learn_from_rewards(scope, lq, lbase, index, rewards, objective=args.objective,
                                      scorer_identity=scorer.spec, reward_mapping=scorer.mapping,
                                      budget=len(plan.pairs))
        timings[scope] = time.perf_counter() - ts
        states = [state] if state is not None else []
        scores, rws = adapted_search(index, eq, ebase.x, states, 100)
        rows.append((f"TTT-Embed {scope}-wise", ndcg(run_from_arrays(eq, index, rws, scores)[name])))
    c = getattr(scorer, "counts", None)
    paid = c().paid if c else len(plan.pairs)
    print(f"task {name}: learn on {args.learn_split} ({len(lq)} queries), evaluate on "
          f"{args.eval_split} ({len(eq)} queries); scorer {args.scorer}; "
          f"b = {args.budget:g} -> {len(plan.pairs)} pairs ({paid} paid now)")
    print(f"{'method':<24}{'nDCG@10':>9}{'delta':>9}{'p (vs raw)':>12}  95% CI of delta")
    for label, per_q in rows:
        mean = sum(per_q.values()) / len(per_q)
        if label == "raw":
            print(f"{label:<24}{mean:9.4f}")
            continue
        cmp = compare(per_q, raw)
        print(f"{label:<24}{mean:9.4f}{cmp.delta:+9.4f}{cmp.p_value:12.4f}  "
              f"[{cmp.ci_low:+.4f}, {cmp.ci_high:+.4f}]")
    print(f"time: setup+retrieval {t1 - t0:.1f}s, scoring {t2 - t1:.1f}s, "
          + ", ".join(f"learn {s} {t:.2f}s" for s, t in timings.items()))


if __name__ == "__main__":
    main()
