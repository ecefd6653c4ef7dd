"""Evaluation results rendered for people: report.md (tables per protocol, harm counts,
reward quality, fitted qdrant-rf coefficients, scorers side by side) and PNG plots; the
console tables use the same rows (:func:`table_rows`). The numbers come from
:mod:`tttembed.evaluation.report`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.reporting import markdown_table, pyplot, save_figure

MAIN = "ndcg@10"

#: How metrics print: report.md in points (x100, 2 decimals, as docs/results.md); the
#: console on trec_eval's 0-1 scale with 4 decimals.
REPORT_SCALE = (100.0, 2)
CONSOLE_SCALE = (1.0, 4)
_scale = REPORT_SCALE


def _pct(x: float | None) -> str:
    unit, digits = _scale
    return "" if x is None or not np.isfinite(x) else f"{unit * x:+.{digits}f}"


def _val(x: float | None) -> str:
    unit, digits = _scale
    return "" if x is None or not np.isfinite(x) else f"{unit * x:.{digits}f}"


def _p(c: Mapping[str, float] | None) -> str:
    if not c:
        return ""
    return f"{c['p_value']:.3g} [{_pct(c['ci_low'])}, {_pct(c['ci_high'])}]"


def table_rows(section: Mapping[str, Any], protocol: str,
               scale: tuple[float, int] = REPORT_SCALE) -> list[list[str]]:
    """One line per row of a protocol: method, b, B, nDCG@10, Delta, R@100, tests."""
    global _scale
    _scale, previous = scale, _scale
    try:
        return _table_rows(section, protocol)
    finally:
        _scale = previous


def _table_rows(section: Mapping[str, Any], protocol: str) -> list[list[str]]:
    out = []
    for r in section["rows"]:
        if r["protocol"] != protocol:
            continue
        s = r["setting"]
        extra = ", ".join(f"{k}={v if not isinstance(v, float) else round(v, 3)}"
                          for k, v in s.items() if k not in ("objective",) or protocol == "objectives")
        out.append([r["method"] + (f" ({extra})" if extra else ""), f"{r['b']:g}",
                    str(r["B"]), _val(r["macro"][MAIN]), _pct(r["delta"][MAIN]),
                    _val(r["macro"]["recall@100"]), _pct(r["delta"]["recall@100"]),
                    _p(r.get("vs_raw")), _p(r.get("vs_direct"))])
    return out


HEAD = ["method", "b", "B", "nDCG@10", "Δ nDCG@10", "R@100", "Δ R@100",
        "vs raw: p [95% CI of Δ]", "vs direct: p [95% CI]"]
TITLES = {"fixed": "Fixed population (learn from S_B, evaluate on all queries)",
          "heldout": "Held-out queries (learn from S, evaluate on unseen U)",
          "loto": "Leave-one-task-out (global state from the other tasks)",
          "alpha": "Alpha ablation (task-wise states from n rewarded queries per task)",
          "breadth-depth": "Breadth vs depth at fixed b = rho * k",
          "objectives": "Objective comparison (same pairs)"}


def per_task_rows(section: Mapping[str, Any], protocol: str = "fixed") -> tuple[list[str], list[list[str]]]:
    tasks = sorted({t for r in section["rows"] if r["protocol"] == protocol for t in r["tasks"]})
    rows = []
    for r in section["rows"]:
        if r["protocol"] != protocol:
            continue
        cells = []
        for t in tasks:
            e = r["tasks"].get(t)
            if e is None:
                cells.append("")
                continue
            star = "*" if e.get("p_raw", 1.0) < 0.05 else ""
            cells.append(f"{_val(e[MAIN])} ({_pct(e['delta_' + MAIN])}{star})"
                         if r["method"] != "raw" else _val(e[MAIN]))
        rows.append([r["method"], f"{r['b']:g}", *cells])
    return ["method", "b", *tasks], rows


def markdown(result: Mapping[str, Any], images: Sequence[str] = ()) -> str:
    cfg = result["config"]
    lines = ["# tttembed eval report", "",
             f"- embedder: `{result['embedder_identity']}`",
             "- tasks: " + ", ".join(f"{t['name']} ({t['queries']} queries"
                                      + (", few" if t["few_queries"] else "") + ")"
                                      for t in result["tasks"]),
             f"- protocols: {', '.join(cfg['protocols'])}; analyses: "
             f"{', '.join(cfg['analyses']) or 'none'}; objective {cfg['objective']}",
             f"- counts: {json.dumps(result['counts'])}",
             f"- timings (s): {json.dumps(result['timings_s'])}", "",
             "Numbers are ×100. Δ is against raw retrieval; nDCG@10 and Recall@100 are "
             "averaged equally across tasks. p: paired sign-flip randomisation test over "
             "queries (task-weighted), CI: 95% bootstrap of Δ. In per-task tables * marks "
             "p < 0.05 vs raw; 'few' marks tasks with fewer than "
             f"{cfg['few_queries']} queries.", ""]
    for s in result["sections"]:
        lines += [f"## Scorer `{s['scorer']}`", ""]
        lines += [f"- note: {n}" for n in s["notes"]]
        for proto in TITLES:
            rows = table_rows(s, proto)
            if not rows:
                continue
            lines += ["", f"### {TITLES[proto]}", "", markdown_table(HEAD, rows)]
            if proto == "fixed":
                if s["aubc"]:
                    lines += ["AUBC (mean Δ nDCG@10 per log-budget, ×100): " + ", ".join(
                        f"{m} {_pct(v)}" for m, v in sorted(s["aubc"].items(),
                                                             key=lambda kv: -kv[1])), ""]
                head, prow = per_task_rows(s)
                lines += ["Per task (nDCG@10, Δ vs raw):", "", markdown_table(head, prow)]
                if s.get("harm"):
                    lines += ["Task x budget cells that differ significantly from raw "
                              "(paired test, p < 0.05):", "", markdown_table(
                                  ["method", "cells", "significant losses", "significant gains",
                                   "auto: budgets shrunk to raw"],
                                  [[m, str(c["cells"]), str(c["losses"]), str(c["gains"]),
                                    f"{c['shrunk']} of {c['states']}" if "states" in c else ""]
                                   for m, c in s["harm"].items()])]
            if proto == "heldout" or proto == "loto":
                head, prow = per_task_rows(s, proto)
                lines += ["Per task:", "", markdown_table(head, prow)]
            if proto == "loto" and s["loto_mean_delta"] is not None:
                lines += [f"Mean Δ over held-out tasks: {_pct(s['loto_mean_delta'])}", ""]
            if proto == "alpha" and s["alpha_regret"]:
                lines += _regret_lines(s["alpha_regret"])
    comp = scorer_comparison(result)
    lines += extras_markdown(result)
    if comp:
        head, rows = comp
        lines += ["## Reward models compared (Δ nDCG@10 vs raw, ×100, same pairs)", "",
                  markdown_table(head, rows)]
    for img in images:
        lines += [f"![{img}]({img})", ""]
    return "\n".join(lines) + "\n"


def _regret_lines(reg: Mapping[str, Any]) -> list[str]:
    head = ["alpha", "regret (all)", *[f"n={n}" for n in reg["by_n"]]]
    rr = [[a, f"{100 * v:.2f}", *[f"{100 * reg['by_n'][n].get(a, float('nan')):.2f}"
                                  for n in reg["by_n"]]]
          for a, v in reg["regret"].items()]
    return [f"Regret to the per-setting oracle alpha ({reg['settings']} settings "
            "(task, n)), nDCG@10 ×100:", "", markdown_table(head, rr)]


def extras_markdown(result: Mapping[str, Any]) -> list[str]:
    """Reward quality per budget and the fitted qdrant-rf coefficients, per scorer."""
    lines: list[str] = []
    for s in result["sections"]:
        if s.get("reward_quality"):
            lines += [f"## Reward quality of `{s['scorer']}` on the rewarded pairs", "",
                      "AUC of the reward against relevance (grade > 0) and nDCG of the "
                      "rewarded candidates ordered by reward; tasks equally.", "",
                      markdown_table(["b", "B", "pairs", "reward AUC", "reward nDCG"], [
                          [f"{q['b']:g}", str(q["B"]), f"{q['pairs']:.0f}", f"{q['auc']:.3f}",
                           f"{q['ndcg']:.3f}"] for q in s["reward_quality"]])]
        if s.get("qdrant_rf"):
            rows = [[t, f["source"], h, f"{c['a']:.4g}", f"{c['b']:.4g}", f"{c['c']:.4g}",
                     "yes" if c["fitted"] else "no (too few queries)", str(c["epochs"]),
                     str(c["train_queries"] + c["val_queries"]), str(f["pairs"])]
                    for t, f in s["qdrant_rf"].items() for h, c in f["fits"].items()]
            lines += [f"## qdrant-rf coefficients (`{s['scorer']}`)", "",
                      "Fitted per task as the qdrant-relevance-feedback package does; "
                      "`crossfit`: fitted on half A of the evaluated queries, applied to "
                      "half B (and vice versa); `synthetic`: on random corpus documents as "
                      "queries. Fitting pairs are scored pairs, apart from the budget B.", "",
                      markdown_table(["task", "source", "fitted on", "a", "b", "c", "fitted",
                                      "epochs", "queries with a pair", "fitting pairs"],
                                     rows)]
    return lines


def scorer_comparison(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """Rows evaluated under two or more scorers, their Δ nDCG@10 side by side."""
    sections = result["sections"]
    if len(sections) < 2:
        return None
    table: dict[tuple, dict[str, float]] = {}
    for s in sections:
        for r in s["rows"]:
            if r["method"] == "raw" or r["method"].startswith("prf"):
                continue
            key = (r["protocol"], r["method"], r["B"],
                   json.dumps(r["setting"], sort_keys=True, default=str))
            table.setdefault(key, {})[s["scorer"]] = r["delta"][MAIN]
    names = [s["scorer"] for s in sections]
    rows = [[p, m, str(B), setting if setting != "{}" else "",
             *[_pct(v.get(n)) for n in names]]
            for (p, m, B, setting), v in table.items() if len(v) >= 2]
    return (["protocol", "method", "B", "setting", *names], rows) if rows else None


def make_plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    """gain_<scorer>.png: Δ nDCG@10 vs log b per method; tasks_<scorer>.png: per-task bars."""
    plt = pyplot()
    paths = []
    for i, s in enumerate(result["sections"]):
        fixed = [r for r in s["rows"] if r["protocol"] == "fixed" and r["B"] > 0]
        if not fixed:
            continue
        tag = f"{i}-" + "".join(c if c.isalnum() else "_" for c in s["scorer"])[:40]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for method in dict.fromkeys(r["method"] for r in fixed):
            pts = sorted((r["b"], 100 * r["delta"][MAIN]) for r in fixed if r["method"] == method)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method,
                    linestyle="--" if method in ("direct", "rw-rocchio", "qdrant-rf") else "-")
        for r in s["rows"]:
            if r["protocol"] == "fixed" and r["method"].startswith("prf"):
                ax.axhline(100 * r["delta"][MAIN], color="grey", linewidth=0.8,
                           linestyle=":" if r["method"] == "prf-avg" else "-.",
                           label=f"{r['method']} (label-free)")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("normalised budget b = B / N (rewards per query)")
        ax.set_ylabel("Δ nDCG@10 vs raw (×100)")
        ax.set_title(f"gain vs budget, scorer {s['scorer']}")
        ax.legend(fontsize=8)
        paths.append(save_figure(plt, fig, out / f"gain_{tag}.png", dpi=110))
        target = min({r["b"] for r in fixed}, key=lambda b: abs(np.log(b / 10.0)))
        at = [r for r in fixed if r["b"] == target]
        tasks = sorted({t for r in at for t in r["tasks"]})
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(tasks)), 4))
        width = 0.8 / max(1, len(at))
        for j, r in enumerate(at):
            ax.bar(np.arange(len(tasks)) + j * width,
                   [100 * r["tasks"].get(t, {}).get("delta_" + MAIN, 0.0) for t in tasks],
                   width, label=r["method"])
        ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel("Δ nDCG@10 vs raw (×100)")
        ax.set_title(f"per task at b = {target:g}, scorer {s['scorer']}")
        ax.legend(fontsize=8)
        paths.append(save_figure(plt, fig, out / f"tasks_{tag}.png", dpi=110))
    return paths
