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


def budget_text(b: float) -> str:
    """``b`` as the tables print it, to 3 significant digits (``8.00143`` -> ``8``)."""
    return f"{b:.3g}" if abs(b) < 1000 else f"{b:,.0f}"


def protocol_table(section: Mapping[str, Any], protocol: str,
                   scale: tuple[float, int] = REPORT_SCALE) -> tuple[list[str], list[list[str]]]:
    """A protocol's header and rows: :data:`HEAD` without its "vs direct" column when no
    row has one (the held-out and leave-one-task-out protocols run no direct reranking)."""
    rows = table_rows(section, protocol, scale)
    if rows and not any(r[-1] for r in rows):
        return list(HEAD[:-1]), [r[:-1] for r in rows]
    return list(HEAD), rows


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
        out.append([r["method"] + (f" ({extra})" if extra else ""), budget_text(r["b"]),
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
        rows.append([r["method"], budget_text(r["b"]), *cells])
    return ["method", "b", *tasks], rows


#: The budget terms of the tables, defined once at the top of report.md.
BUDGET_TERMS = ("B is the reward budget (scored query-candidate pairs) and b = B / N the "
                "budget per evaluated query; S_B is the set of B rewarded pairs the "
                "methods learn from, chosen by task-balanced water-filling over each "
                "query's top candidates (a larger budget's set contains a smaller one's); "
                "in the held-out protocol S is the rewarded share of the queries and U the "
                "unseen rest.")


def _counter_tables(result: Mapping[str, Any]) -> list[str]:
    """The run's counters and timings as two-column tables."""
    counts = [[k, v] for k, v in result["counts"].items()]
    timings = [[k, v] for k, v in result["timings_s"].items()]
    return ["Counts:", "", markdown_table(["counter", "value"], counts, digits=4),
            "Timings:", "", markdown_table(["stage", "seconds"], timings, digits=3)]


def markdown(result: Mapping[str, Any], images: Sequence[str] = ()) -> str:
    cfg = result["config"]
    lines = ["# tttembed eval report", "",
             f"- embedder: `{result['embedder_identity']}`",
             "- tasks: " + ", ".join(f"{t['name']} ({t['queries']} queries"
                                      + (", few" if t["few_queries"] else "")
                                      + (", ignore_identical_ids" if t.get(
                                          "ignore_identical_ids") else "") + ")"
                                      for t in result["tasks"]),
             f"- protocols: {', '.join(cfg['protocols'])}; analyses: "
             f"{', '.join(cfg['analyses']) or 'none'}; objective {cfg['objective']}", "",
             *_counter_tables(result),
             "Numbers are ×100. Δ is against raw retrieval; nDCG@10 and Recall@100 are "
             "averaged equally across tasks. p: paired sign-flip randomisation test over "
             "queries (task-weighted), CI: 95% bootstrap of Δ. In per-task tables * marks "
             "p < 0.05 vs raw; 'few' marks tasks with fewer than "
             f"{cfg['few_queries']} queries.", "", BUDGET_TERMS, ""]
    for s in result["sections"]:
        lines += [f"## Scorer `{s['scorer']}`", ""]
        lines += [f"- note: {n}" for n in s["notes"]]
        for proto in TITLES:
            head, rows = protocol_table(s, proto)
            if not rows:
                continue
            lines += ["", f"### {TITLES[proto]}", "", markdown_table(head, rows)]
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
                                   "auto: budgets shrunk to raw", "guard ran",
                                   "validation pairs / learning pairs"],
                                  [[m, str(c["cells"]), str(c["losses"]), str(c["gains"]),
                                    f"{c['shrunk']} of {c['states']}" if "states" in c else "",
                                    _guard_cells(c)[0], _guard_cells(c)[1]]
                                   for m, c in s["harm"].items()])]
            lines += _choice_lines(s, proto)
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


def _choice_lines(section: Mapping[str, Any], protocol: str) -> list[str]:
    """Method auto's choice per task and budget (``eval --select auto``)."""
    rows = [r for r in section["rows"] if r["protocol"] == protocol and r.get("chosen")]
    if not rows:
        return []
    tasks = sorted({t for r in rows for t in r["chosen"]})
    return ["Method `auto`: the state chosen per task (shared part + query part; "
            "`raw`: neither showed a gain):", "", markdown_table(
                ["b", "B (with validation)", *tasks],
                [[budget_text(r["b"]), str(r["B"]), *[r["chosen"].get(t, "") for t in tasks]]
                 for r in rows]), ""]


def _guard_cells(c: Mapping[str, Any]) -> tuple[str, str]:
    """The harm table's guard columns: budgets validated by judged diff, and the
    validation pairs as a share of the learning pairs."""
    if "guarded" not in c:
        return "", ""
    share = c["validation_pairs"] / c["learning_pairs"] if c.get("learning_pairs") else 0.0
    return (f"{c['guarded']} of {c.get('validated', c.get('states', 0))}",
            f"{c['validation_pairs']:,} / {c['learning_pairs']:,} ({100 * share:.1f}%)")


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
                      "reward AUC: AUC of the reward against relevance (grade > 0) on the "
                      "pairs each budget paid (unjudged = non-relevant), and nDCG of the "
                      "rewarded candidates ordered by reward; tasks equally. Not the audit "
                      "AUC of `learn --audit` (judged documents and the base top-10 of a "
                      "few queries): other pairs, another value.", "",
                      markdown_table(["b", "B", "rewarded pairs", "queries", "reward AUC",
                                      "reward nDCG"], [
                          [budget_text(q["b"]), str(q["B"]), f"{q['pairs']:.0f}",
                           f"{q['queries']:.0f}" if "queries" in q else "",
                           f"{q['auc']:.3f}", f"{q['ndcg']:.3f}"] for q in s["reward_quality"]])]
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


#: Colour per method family (an ``-auto`` variant shares its scope's colour, dashed).
_COLOURS = {"global": "tab:green", "task": "tab:purple", "query": "tab:pink",
            "direct": "tab:blue", "rw-rocchio": "tab:orange", "qdrant-rf": "tab:brown",
            "auto": "black"}
_MARKERS = "osD^vP*X<>hp"
GAIN_YLABEL = "Δ nDCG@10 vs raw (points, ×100)"


def _style(j: int, method: str) -> dict[str, Any]:
    """Colour, marker and line style of the ``j``-th method of a gain plot."""
    family = method.removesuffix("-auto")
    return {"color": _COLOURS.get(family, f"C{j % 10}"), "marker": _MARKERS[j % len(_MARKERS)],
            "linestyle": "--" if method.endswith("-auto") else "-"}


def _interval(r: Mapping[str, Any]) -> tuple[float, float]:
    """The 95% bootstrap interval of a row's Δ nDCG@10 vs raw, ×100 (NaN when untested)."""
    c = r.get("vs_raw") or {}
    return 100 * c.get("ci_low", float("nan")), 100 * c.get("ci_high", float("nan"))


def _fixed(section: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The fixed-population rows with a budget (B > 0)."""
    return [r for r in section["rows"] if r["protocol"] == "fixed" and r["B"] > 0]


def gain_figure(section: Mapping[str, Any]) -> Any:
    """Δ nDCG@10 vs log b, one line per method with its 95% interval as error bars; the
    methods are dodged along x and differ in marker and line style, so none hides another;
    None without fixed-population rows."""
    fixed = _fixed(section)
    if not fixed:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    methods = list(dict.fromkeys(r["method"] for r in fixed))
    for j, method in enumerate(methods):
        rows = sorted((r for r in fixed if r["method"] == method), key=lambda r: r["b"])
        dodge = 10 ** (0.018 * (j - (len(methods) - 1) / 2))
        y = np.array([100 * r["delta"][MAIN] for r in rows])
        lo, hi = np.array([_interval(r) for r in rows]).T
        yerr = np.maximum([y - lo, hi - y], 0.0)  # a Δ outside its interval: no bar side
        ax.errorbar([r["b"] * dodge for r in rows], y, yerr=yerr, label=method,
                    capsize=2, elinewidth=0.7, markersize=4, linewidth=1.2,
                    **_style(j, method))
    for r in section["rows"]:
        if r["protocol"] == "fixed" and r["method"].startswith("prf"):
            ax.axhline(100 * r["delta"][MAIN], color="grey", linewidth=0.9,
                       linestyle=":" if r["method"] == "prf-avg" else "-.",
                       label=f"{r['method']} (label-free, no budget)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("normalised budget b = B / N (rewarded pairs per query, log scale)")
    ax.set_ylabel(GAIN_YLABEL)
    ax.set_title(f"Gain vs budget, scorer {section['scorer']} "
                 "(bars: 95% bootstrap CI; points offset along b)")
    ax.grid(True, which="major", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: "label-free" in labels[i])
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _task_label(rows: Sequence[Mapping[str, Any]], task: str) -> str:
    """A task's tick label: its name over its number of queries (and 'few')."""
    e = next(r["tasks"][task] for r in rows if task in r["tasks"])
    n = e.get("n")
    return task + (f"\n({n} q{', few' if e.get('few') else ''})" if n is not None else "")


def tasks_figure(section: Mapping[str, Any]) -> Any:
    """Per-task Δ nDCG@10 at the budget nearest b = 10: one bar group per task, one bar
    per method; * marks p < 0.05 vs raw. None without fixed-population rows."""
    fixed = _fixed(section)
    if not fixed:
        return None
    target = min({r["b"] for r in fixed}, key=lambda b: abs(np.log(b / 10.0)))
    at = [r for r in fixed if r["b"] == target]
    tasks = sorted({t for r in at for t in r["tasks"]})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 0.18 * len(tasks) * len(at) + 3.5), 4.5))
    width = 0.8 / max(1, len(at))
    x = np.arange(len(tasks))
    for j, r in enumerate(at):
        cells = [r["tasks"].get(t, {}) for t in tasks]
        xs = x + (j - (len(at) - 1) / 2) * width
        ys = np.array([100 * c.get("delta_" + MAIN, np.nan) for c in cells])
        ax.bar(xs, ys, width, label=r["method"], color=f"C{j % 10}")
        for xi, yi, c in zip(xs, ys, cells):
            if c.get("p_raw", 1.0) < 0.05:
                ax.annotate("*", (xi, yi), xytext=(0, 1 if yi >= 0 else -9),
                            textcoords="offset points", ha="center", fontsize=9)
    ax.set_xticks(x, [_task_label(at, t) for t in tasks])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("task (evaluated queries)")
    ax.set_ylabel(GAIN_YLABEL)
    ax.set_title(f"Per task at b = {target:g} (B = {at[0]['B']}), scorer {section['scorer']}"
                 "; * p < 0.05 vs raw", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def make_plots(result: Mapping[str, Any], out: Path) -> list[Path]:
    """gain_<scorer>.png: Δ nDCG@10 vs log b per method; tasks_<scorer>.png: per-task bars."""
    plt = pyplot()
    paths = []
    for i, s in enumerate(result["sections"]):
        tag = f"{i}-" + "".join(c if c.isalnum() else "_" for c in s["scorer"])[:40]
        for name, build in (("gain", gain_figure), ("tasks", tasks_figure)):
            fig = build(s)
            if fig is not None:
                paths.append(save_figure(plt, fig, out / f"{name}_{tag}.png", dpi=110))
    return paths
