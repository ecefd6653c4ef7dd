"""The guard study behind docs/results.md "Guarded adaptation" (one command, resumable).

    python benchmarks/guard_study.py --data-root ../shared/data --out docs/results/guard

The six shared retrieval tasks, the bundled all-MiniLM-L6-v2, six judges (noisy-qrels
sigma 0, 0.2, 0.5, 1.0; label flips 0.2; BM25), b in {0.1, 1, 10, 100}, the fixed and the
held-out protocols; every method (direct, PRF, reward-weighted Rocchio, Qdrant's formula,
every scope with the rule and with ``--alpha auto``) and ``--select auto``. It prints the
issue's goal table per judge, measured on the rows of this run:

- ``auto`` and every ``<scope>-auto``: task x budget cells significantly worse than raw;
- where a scope's rule gains significantly, the share of those cells where its ``-auto``
  keeps at least half of the gain;
- AUBC of ``auto`` minus the best deployable method's in hindsight (x100);
- validation pairs as a share of the learning pairs.

Everything is cached (embeddings, indexes, the ledger, cells, tests): a rerun computes
nothing. The hyperparameters are the write-ups'; no label is used but by the noisy-qrels
judges themselves (a controlled simulation of a reranker of known quality).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _support import study_parser, write_json
from claims import Goal, emit

TASKS = ("scifact", "cranfield", "cisi", "medline", "cacm", "cosqa_coir")
JUDGES = ("noisy-qrels:?sigma=0", "noisy-qrels:?sigma=0.2", "noisy-qrels:?sigma=0.5",
          "noisy-qrels:?sigma=1.0", "noisy-qrels:?sigma=0&flip=0.2", "bm25")
BUDGETS = (0.1, 1.0, 10.0, 100.0)
#: The deployable states of method auto (raw's AUBC is 0).
DEPLOYABLE = ("global", "task", "query", "rw-rocchio", "qdrant-rf")
GOALS = {
    "harm": Goal("auto and every <scope>-auto: cells significantly worse than raw (all judges)",
                 "<=", 0.0, " cells"),
    "kept": Goal("<scope>-auto keeps >= half of a significant rule gain (share of cells)",
                 ">=", 1.0),
    "aubc": Goal("AUBC of auto minus the best deployable method's, worst judge (x100)",
                 ">=", -0.5, " points"),
    "validation": Goal("validation pairs / learning pairs, largest judge", "<=", 0.1),
}


def _rows(section: Mapping[str, Any], protocol: str) -> list[Mapping[str, Any]]:
    return [r for r in section["rows"] if r["protocol"] == protocol]


def _sig(entry: Mapping[str, Any], level: float = 0.05) -> bool:
    return entry.get("p_raw", 1.0) < level


def judge_goals(section: Mapping[str, Any]) -> dict[str, Any]:
    """One judge's goal figures from its report section (fixed protocol; held-out harm
    counted too)."""
    fixed = _rows(section, "fixed")
    guarded = [r for r in section["rows"] if r["method"] == "auto" or r["method"].endswith("-auto")]
    harm = {f"{r['protocol']}/{r['method']}/b={r['b']:g}/{t}": round(e["delta_ndcg@10"], 4)
            for r in guarded for t, e in r["tasks"].items()
            if _sig(e) and e["delta_ndcg@10"] < 0}
    rule = {(r["method"], r["b"]): r for r in fixed if r["method"] in ("global", "task", "query")}
    kept, cells = 0, 0
    for r in fixed:
        if not r["method"].endswith("-auto"):
            continue
        base = rule.get((r["method"][: -len("-auto")], r["b"]))
        for t, e in (base or {}).get("tasks", {}).items():
            if _sig(e) and e["delta_ndcg@10"] > 0:
                cells += 1
                kept += r["tasks"][t]["delta_ndcg@10"] >= 0.5 * e["delta_ndcg@10"]
    aubc = section.get("aubc", {})
    best = max([(aubc.get(m, float("-inf")), m) for m in DEPLOYABLE] + [(0.0, "raw")])
    validation = sum(r.get("validation", {}).get("paid", 0) for r in guarded)
    learning = sum(r["B"] - (r.get("validation", {}).get("paid", 0) if r["method"] == "auto"
                             else 0) for r in guarded)  # auto's B counts its validation
    chosen: dict[str, int] = {}
    for r in section["rows"]:
        for c in (r.get("chosen") or {}).values():
            chosen[f"{r['protocol']}:{c}"] = chosen.get(f"{r['protocol']}:{c}", 0) + 1
    return {"harm_cells": len(harm), "harm": harm, "rule_gain_cells": cells, "kept": kept,
            "aubc_auto": aubc.get("auto"), "aubc_best": best[0], "best": best[1],
            "aubc_gap_x100": None if aubc.get("auto") is None else
            100 * (aubc["auto"] - best[0]),
            "validation_pairs": validation, "learning_pairs": learning,
            "validation_share": validation / learning if learning else 0.0,
            "chosen": dict(sorted(chosen.items())), "harm_table": section.get("harm", {})}


def print_table(goals: Mapping[str, Mapping[str, Any]]) -> None:
    head = ("judge", "harm cells", "rule gains kept", "AUBC auto", "best (hindsight)",
            "gap x100", "validation share")
    print(" | ".join(head))
    for judge, g in goals.items():
        kept = f"{g['kept']}/{g['rule_gain_cells']}"
        auto = "-" if g["aubc_auto"] is None else f"{100 * g['aubc_auto']:+.2f}"
        gap = "-" if g["aubc_gap_x100"] is None else f"{g['aubc_gap_x100']:+.2f}"
        print(" | ".join((judge, str(g["harm_cells"]), kept, auto,
                          f"{100 * g['aubc_best']:+.2f} ({g['best']})", gap,
                          f"{g['validation_share']:.3f}")))


def overall(goals: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    gaps = [g["aubc_gap_x100"] for g in goals.values() if g["aubc_gap_x100"] is not None]
    cells = sum(g["rule_gain_cells"] for g in goals.values())
    return {"harm": float(sum(g["harm_cells"] for g in goals.values())),
            "kept": sum(g["kept"] for g in goals.values()) / cells if cells else None,
            "aubc": min(gaps) if gaps else None,
            "validation": max(g["validation_share"] for g in goals.values())}


def main(argv: Sequence[str] | None = None) -> None:
    ap = study_parser(__doc__, "docs/results/guard", TASKS)
    ap.add_argument("--judges", default=";".join(JUDGES), help="';'-separated scorer specs")
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    from tttembed.cli._common import progress_group, quiet_libraries
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.report import write_report
    from tttembed.evaluation.runner import run_eval

    quiet_libraries()
    cfg = EvalConfig(
        tasks=tuple(t for t in args.tasks.split(",") if t),
        scorers=tuple(j for j in args.judges.split(";") if j),
        budgets=tuple(float(b) for b in args.budgets.split(",")),
        protocols=("fixed", "heldout"), alphas=("rule", "auto"), selects=("auto",),
        baselines=("direct", "prf-avg", "prf-rocchio", "rw-rocchio", "qdrant-rf"),
        data_root=args.data_root, cache_dir=args.cache_dir, n_resamples=args.resamples)
    with progress_group() as stage:
        result = run_eval(cfg, stage)
    write_report(result, Path(args.out), per_query=False)
    goals = {s["scorer"]: judge_goals(s) for s in result["sections"]}
    write_json(Path(args.out) / "goals.json", goals)
    print_table(goals)
    print("counts", json.dumps(result["counts"]))
    emit(GOALS, overall(goals), note=f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
