"""The offline TTT-Embed study behind docs/results.md (one command, resumable).

    python benchmarks/study.py --data-root ../shared/data --out docs/results

Every retrieval task of the data root (scifact, cranfield, cisi, medline, cacm, cosqa_coir),
the bundled all-MiniLM-L6-v2, and two reward models: ``bm25`` (label-free, every protocol)
and ``qrels`` (human judgments; transfer protocols only, where the judged queries are
never the evaluated ones). Then SciFact's own transfer: learn from the train split's
judged claims, evaluate every test claim.

Everything is cached (embeddings, indexes, the reward ledger, per-cell metrics, the paired
tests' results), so an interrupted run resumes and a second run makes zero embedding and
scorer calls and recomputes no cell and no test; the script prints the counts, the time of
each part and its claim: a warm rerun (nothing computed) within :data:`GOALS`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from _support import study_parser, write_json
from claims import Goal, emit

#: Every scope with the seed's rule n/(n+1) and with alpha chosen by reward cross-validation.
ALPHAS = ("rule", "auto")
TASKS = ("scifact", "cranfield", "cisi", "medline", "cacm", "cosqa_coir")
GOALS = {
    "warm": Goal("study: warm rerun (nothing recomputed)", "<=", 15.0, " s"),
    "cold": Goal("study: run that computed cells, tests or rewards", "info", None, " s"),
}


def main() -> None:
    ap = study_parser(__doc__, "docs/results", TASKS)
    ap.add_argument("--skip-analyses", action="store_true")
    ap.add_argument("--per-query", action="store_true",
                    help="also write per_query.json (about 10 MB for all tasks)")
    args = ap.parse_args()
    t_start = time.perf_counter()

    from tttembed.cli._common import progress_group, quiet_libraries
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.report import write_report
    from tttembed.evaluation.runner import run_eval

    quiet_libraries()
    tasks = tuple(t for t in args.tasks.split(",") if t)
    common = dict(data_root=args.data_root, cache_dir=args.cache_dir,
                  n_resamples=args.resamples)
    runs = {
        "all-tasks": EvalConfig(
            tasks=tasks, scorers=("bm25", "qrels"), protocols=("fixed", "heldout", "loto"),
            analyses=() if args.skip_analyses else ("alpha", "breadth-depth", "objectives"),
            alphas=ALPHAS, **common),
        "scifact-train-to-test": EvalConfig(
            tasks=("scifact",), scorers=("qrels", "bm25"), protocols=("heldout",),
            scopes=("global", "task"), train_split="train", alphas=ALPHAS, **common),
    }
    summary = {}
    for name, cfg in runs.items():
        if name == "scifact-train-to-test" and "scifact" not in tasks:
            continue
        t = time.perf_counter()
        with progress_group() as stage:
            result = run_eval(cfg, stage)
        out = Path(args.out) / name
        write_report(result, out, per_query=args.per_query)
        summary[name] = {"seconds": round(time.perf_counter() - t, 1),
                         "counts": result["counts"], "timings_s": result["timings_s"]}
        print(name, json.dumps(summary[name]), flush=True)
    write_json(Path(args.out) / "study-run.json", summary)
    computed = sum(s["counts"].get(k, 0) for s in summary.values()
                   for k in ("cells_computed", "comparisons_computed", "scorer_paid",
                             "embedding_model_calls"))
    subset = "all six tasks" if set(tasks) == set(TASKS) else f"tasks {','.join(tasks)} only"
    emit(GOALS, {"cold" if computed else "warm": time.perf_counter() - t_start}, note=subset)


if __name__ == "__main__":
    main()
