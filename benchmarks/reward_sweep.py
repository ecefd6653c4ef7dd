"""Reward-quality sweep: TTT-Embed vs direct reranking vs Qdrant relevance feedback (one command).

    python benchmarks/reward_sweep.py --data-root ../shared/data --cache-dir /tmp/study/cache

The fixed protocol on every shared task at b = 1, 10, 100 with the scorer
``noisy-qrels:?sigma=S&seed=0`` for S in {0, 0.1, 0.2, 0.35, 0.5, 1.0}: the human grade /
top grade plus Gaussian noise of sd S, clipped to [0, 1] (a controlled simulation of a
reranker of known quality on the evaluated queries, not a transfer result). Methods:
direct reranking, TTT-Embed global / task / query (alpha rule n/(n+1)), reward-weighted
Rocchio and ``qdrant-rf`` (Qdrant 1.17's naive relevance feedback, coefficients cross-fitted
per task). Each setting's reward quality is the AUC (and nDCG) of the reward against the
judgments on the rewarded pairs.

Writes ``<out>/reward_sweep.md`` (tables), ``reward_sweep.json`` (every number) and
``reward_sweep.png`` (gain vs reward AUC, one line per method, one panel per budget).
Everything goes through the eval caches: a rerun recomputes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from _support import study_parser

TASKS = ("scifact", "cosqa_coir", "cranfield", "cisi", "medline", "cacm")
SIGMAS = (0.0, 0.1, 0.2, 0.35, 0.5, 1.0)
BUDGETS = (1.0, 10.0, 100.0)
METHODS = ("direct", "global", "task", "query", "rw-rocchio", "qdrant-rf")
TTT = ("global", "task", "query")
LEVEL = 0.05


def spec(sigma: float, flip: float, seed: int) -> str:
    return f"noisy-qrels:?sigma={sigma:g}&seed={seed}" + (f"&flip={flip:g}" if flip else "")


def collect(result: dict[str, Any], settings: list[dict[str, Any]], resamples: int
            ) -> list[dict[str, Any]]:
    """One entry per (setting, budget): reward quality, each method's Δ and paired tests."""
    from tttembed.evaluation.report import weighted_compare

    out = []
    for st, sec in zip(settings, result["sections"]):
        quality = {round(q["b"], 6): q for q in sec.get("reward_quality", [])}
        for b in sorted({r["b"] for r in sec["rows"] if r["B"] > 0}):
            rows = {r["method"]: r for r in sec["rows"] if r["b"] == b and r["B"] > 0}
            q = quality[round(b, 6)]
            e: dict[str, Any] = {**st, "b": b, "B": next(iter(rows.values()))["B"],
                                 "auc": q["auc"], "reward_ndcg": q["ndcg"], "methods": {}}
            for m, r in rows.items():
                vr = r.get("vs_raw") or {}
                e["methods"][m] = {"delta": r["delta"]["ndcg@10"], "p_raw": vr.get("p_value")}
            order = sorted(rows, key=lambda m: -rows[m]["delta"]["ndcg@10"])
            best_ttt = max((m for m in TTT if m in rows),
                           key=lambda m: rows[m]["delta"]["ndcg@10"])
            e["best"], e["second"], e["best_ttt"] = order[0], order[1], best_ttt
            pairs = {"best_vs_second": (order[0], order[1]),
                     "ttt_vs_qdrant": (best_ttt, "qdrant-rf"),
                     "ttt_vs_direct": (best_ttt, "direct"),
                     "qdrant_vs_direct": ("qdrant-rf", "direct")}
            for name, (x, y) in pairs.items():
                e[name] = weighted_compare(rows[x]["per_query"]["ndcg@10"],
                                           rows[y]["per_query"]["ndcg@10"], resamples)
            out.append(e)
    return out


def _pd(c: dict[str, float] | None) -> str:
    if not c:
        return ""
    star = "*" if c["p_value"] < LEVEL else ""
    return f"{100 * c['delta']:+.2f}{star} (p={c['p_value']:.3g})"


def tables(entries: list[dict[str, Any]]) -> str:
    lines = []
    for b in sorted({e["b"] for e in entries}):
        at = [e for e in entries if e["b"] == b]
        head = ["sigma", "flip", "reward AUC", *METHODS, "best", "best − 2nd", "TTT best − qdrant-rf",
                "TTT best − direct", "qdrant-rf − direct"]
        lines += [f"### b = {b:g} (B = {at[0]['B']:,} pairs)", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for e in at:
            cells = []
            for m in METHODS:
                r = e["methods"].get(m)
                star = "*" if r and r["p_raw"] is not None and r["p_raw"] < LEVEL else ""
                cells.append(f"{100 * r['delta']:+.2f}{star}" if r else "")
            lines.append("| " + " | ".join([
                f"{e['sigma']:g}", f"{e['flip']:g}", f"{e['auc']:.3f}", *cells, e["best"],
                _pd(e["best_vs_second"]), f"{e['best_ttt']} {_pd(e['ttt_vs_qdrant'])}",
                f"{e['best_ttt']} {_pd(e['ttt_vs_direct'])}", _pd(e["qdrant_vs_direct"])]) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(entries: list[dict[str, Any]], path: Path) -> Path:
    from tttembed.reporting import pyplot, save_figure

    plt = pyplot()
    budgets = sorted({e["b"] for e in entries})
    fig, axes = plt.subplots(1, len(budgets), figsize=(5 * len(budgets), 4.2), sharey=False)
    for ax, b in zip(axes if len(budgets) > 1 else [axes], budgets):
        at = sorted((e for e in entries if e["b"] == b), key=lambda e: e["auc"])
        for m in METHODS:
            pts = [(e["auc"], 100 * e["methods"][m]["delta"]) for e in at
                   if m in e["methods"] and not e["flip"]]
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m,
                           linestyle="--" if m in ("direct", "rw-rocchio", "qdrant-rf") else "-")
            flips = [(e["auc"], 100 * e["methods"][m]["delta"]) for e in at
                     if m in e["methods"] and e["flip"]]
            ax.scatter([p[0] for p in flips], [p[1] for p in flips], marker="x",
                       color=line[0].get_color())
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(f"b = {b:g}")
        ax.set_xlabel("reward AUC on the rewarded pairs")
        ax.set_ylabel("Δ nDCG@10 vs raw (×100)")
    axes[0].legend(fontsize=8) if len(budgets) > 1 else axes.legend(fontsize=8)
    fig.suptitle("Gain vs reward quality (noisy-qrels, fixed protocol, tasks equally; "
                 "o: Gaussian noise sigma, x: label flips)")
    fig.tight_layout()
    return save_figure(plt, fig, path, dpi=110)


def main() -> None:
    ap = study_parser(__doc__, "docs/results", TASKS)
    ap.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SIGMAS))
    ap.add_argument("--flips", default="", help="extra settings: flip rates at sigma 0")
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()

    from tttembed.cli._common import quiet_libraries
    from tttembed.core.io import write_json, write_text
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.runner import run_eval

    quiet_libraries()
    settings = [{"sigma": float(s), "flip": 0.0} for s in args.sigmas.split(",") if s]
    settings += [{"sigma": 0.0, "flip": float(f)} for f in args.flips.split(",") if f]
    cfg = EvalConfig(tasks=tuple(t for t in args.tasks.split(",") if t),
                     scorers=tuple(spec(s["sigma"], s["flip"], args.seed) for s in settings),
                     scopes=TTT, budgets=tuple(float(b) for b in args.budgets.split(",")),
                     baselines=("direct", "rw-rocchio", "qdrant-rf"), data_root=args.data_root,
                     cache_dir=args.cache_dir, n_resamples=args.resamples)
    result = run_eval(cfg)
    entries = collect(result, settings, args.resamples)
    out = Path(args.out)
    fits = {sec["scorer"]: sec.get("qdrant_rf") for sec in result["sections"]}
    write_json(out / "reward_sweep.json", {"config": {**vars(args)}, "entries": entries,
                                           "qdrant_rf": fits, "counts": result["counts"],
                                           "timings_s": result["timings_s"]}, indent=1)
    md = ["Δ nDCG@10 vs raw ×100, six tasks equally; * = paired randomisation test "
          f"p < {LEVEL} (vs raw in method columns; between the two methods named in the "
          "comparison columns).", "", tables(entries)]
    write_text(out / "reward_sweep.md", "\n".join(md))
    png = plot(entries, out / "reward_sweep.png")
    c = result["counts"]
    print(f"wrote {out / 'reward_sweep.md'}, {png}; cells computed {c['cells_computed']}, "
          f"cached {c['cells_cached']}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
