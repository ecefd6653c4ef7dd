"""The chain evaluation report folder: results.json, report.md and three PNG plots.

The folder is built in a temporary sibling and swapped in with one rename
(``core.io.atomic_directory``): a failure midway leaves the previous report (or nothing),
never a partial one. Rates in these files are percentages (0-100), as in the published
``docs/results-chain`` tables; the console tables show them as fractions (0-1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tttembed.chain.analysis import WRONG_BUCKETS
from tttembed.core.io import atomic_directory, write_text
from tttembed.reporting import fmt, markdown_table, pyplot, save_figure, write_results
from tttembed.types import PathLike

#: The files of a report folder, in the order they are written.
REPORT_FILES = ("results.json", "report.md", "completeness.png", "mismatch.png",
                "recovery.png")


def _retrieval_table(config: Mapping[str, Any], results: Mapping[str, Any]) -> list[str]:
    systems = results["systems"]
    hop_keys = sorted({h for m in systems.values() for h in m["by_hops"]})
    headers = ["system", "C@5", "C@10", "recall@5", "recall@10"] + \
        [f"C@5 ({h}-hop)" for h in hop_keys] + ["s / question"]
    rows = [[name, m["all"]["C@5"], m["all"]["C@10"], m["all"]["recall@5"],
             m["all"]["recall@10"]] + [m["by_hops"].get(h, {}).get("C@5") for h in hop_keys]
            + [results["latency_s_per_question"].get(name)] for name, m in systems.items()]
    return ["# Chain retrieval report", "",
            f"Data: `{config.get('data')}` split `{config.get('split')}`, "
            f"{config.get('n_questions')} questions, T = {config.get('steps')} steps.", "",
            "## Retrieval (%)", "",
            "C@k: questions whose whole gold chain is in the top k; recall@k: gold "
            "passages in the top k.", "", markdown_table(headers, rows)]


def _mismatch_steps(results: Mapping[str, Any]) -> tuple[list[int], dict[str, list[Any]]]:
    """The steps of the mismatch analysis and each encoder's share per step."""
    mm = results["mismatch"]
    steps = sorted({r["step"] for rows in mm.values() for r in rows})
    return steps, {name: [next((r["share_wrong"] for r in mm[name] if r["step"] == s), None)
                          for s in steps] for name in mm}


def report_markdown(config: Mapping[str, Any], results: Mapping[str, Any]) -> str:
    """report.md: retrieval, state mismatch, next-step success and deletion tables."""
    md = _retrieval_table(config, results)
    steps, shares = _mismatch_steps(results)
    md += ["## State mismatch (% of states still missing gold that hold a wrong passage)",
           "", markdown_table(["encoder"] + [f"step {s}" for s in steps],
                              [[name, *row] for name, row in shares.items()])]
    rec = results["recovery"]
    md += ["", f"## Next-step success (%) on {rec['n_states']} states reached by "
           f"`{rec['reference']}`, by wrong passages in the history", ""]
    md.append(markdown_table(["encoder"] + [f"{b} wrong" for b in WRONG_BUCKETS],
                             [[name] + [f"{fmt(v[b]['rate'])} (n={v[b]['n']})"
                                        for b in WRONG_BUCKETS]
                              for name, v in rec["by_encoder"].items()]))
    dele = {k: v for k, v in results["deletion"].items() if k != "reference"}
    md += ["", "## Deletion counterfactual (states with a wrong passage)", "",
           "Next-step success (%) on the states as reached and with their wrong passages "
           "deleted; cost = wrong deleted - as reached (points lost to the wrong passages).",
           ""]
    md.append(markdown_table(["encoder", "states", "as reached", "wrong deleted", "cost"],
                             [[k, v["n"], v["original"], v["deleted"], v["cost"]]
                              for k, v in dele.items()]))
    md += ["", "![completeness](completeness.png) ![mismatch](mismatch.png) "
           "![recovery](recovery.png)", ""]
    return "\n".join(md)


_MARKERS = "osD^vP*X<>hp"
_LINESTYLES = ("-", "--", "-.", ":")


def _values(values: Sequence[Any]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def _slanted(labels: Sequence[str], fig_width: float) -> bool:
    """Whether the longest label (about 0.07 in per character at 8 pt) is wider than the
    room one group has on the axes."""
    room = 0.75 * fig_width / max(len(labels), 1)
    return 0.07 * max((len(g) for g in labels), default=0) > room


def bar_figure(groups: Sequence[str], series: Mapping[str, Sequence[float | None]], *,
               title: str = "", xlabel: str = "", ylabel: str = "") -> Any:
    """Grouped bars, one group per label in ``groups`` (None: no bar); long group labels
    are slanted so that they never overlap; the legend sits right of the axes."""
    plt = pyplot()
    fig_width = min(14.0, max(5.0, 0.28 * len(groups) * max(len(series), 1) + 3.0))
    fig, ax = plt.subplots(figsize=(fig_width, 4.0))
    width = 0.8 / max(len(series), 1)
    for j, (name, values) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, _values(values), width, label=name, color=f"C{j % 10}")
    for i in range(len(groups)):
        if series and all(v[i] is None for v in series.values()):
            ax.text(i, 0, "no data", ha="center", va="bottom", fontsize=8, color="grey")
    ax.set_xlim(-0.5, len(groups) - 0.5)
    slant = _slanted(groups, fig_width)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8,
                  rotation=30 if slant else 0, ha="right" if slant else "center",
                  rotation_mode="anchor")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def line_figure(x: Sequence[int], series: Mapping[str, Sequence[float | None]], *,
                title: str = "", xlabel: str = "", ylabel: str = "") -> Any:
    """One line per series over integer steps (None: a gap), a tick on every step; the
    series are dodged slightly along x and differ in marker and line style, so none
    hides another."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    spread = 0.25 / max(len(series) - 1, 1)
    for j, (name, values) in enumerate(series.items()):
        dodge = (j - (len(series) - 1) / 2) * spread
        ax.plot([s + dodge for s in x], _values(values), label=name, color=f"C{j % 10}",
                marker=_MARKERS[j % len(_MARKERS)],
                linestyle=_LINESTYLES[j % len(_LINESTYLES)])
    ax.set_xticks(list(x))
    if x:
        ax.set_xlim(min(x) - 0.5, max(x) + 0.5)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def bar_plot(path: Path, groups: Sequence[str],
             series: Mapping[str, Sequence[float | None]], **labels: str) -> Path:
    """:func:`bar_figure` written to ``path``."""
    return save_figure(pyplot(), bar_figure(groups, series, **labels), path)


def line_plot(path: Path, x: Sequence[int],
              series: Mapping[str, Sequence[float | None]], **labels: str) -> Path:
    """:func:`line_figure` written to ``path``."""
    return save_figure(pyplot(), line_figure(x, series, **labels), path)


def _bucket_labels(rec: Mapping[str, Any]) -> list[str]:
    """The recovery buckets with their number of states (the same for every encoder)."""
    first: Mapping[str, Any] = next(iter(rec.values()), {})
    return [f"{b.replace('>=', '≥')} wrong" + (f" (n={first[b]['n']})" if b in first else "")
            for b in WRONG_BUCKETS]


def write_plots(folder: Path, results: Mapping[str, Any]) -> list[Path]:
    """completeness.png, mismatch.png and recovery.png in ``folder``."""
    systems = results["systems"]
    names = list(systems)
    steps, shares = _mismatch_steps(results)
    rec = results["recovery"]["by_encoder"]
    return [
        bar_plot(folder / "completeness.png", names,
                 {"C@5": [systems[n]["all"]["C@5"] for n in names],
                  "C@10": [systems[n]["all"]["C@10"] for n in names]},
                 title="Questions with the complete gold chain in the top k",
                 xlabel="system", ylabel="% of questions"),
        line_plot(folder / "mismatch.png", steps, shares,
                  title="States holding a wrong passage", xlabel="chain step",
                  ylabel="% of states still missing gold\nthat hold a wrong passage"),
        bar_plot(folder / "recovery.png", _bucket_labels(rec),
                 {n: [v[b]["rate"] for b in WRONG_BUCKETS] for n, v in rec.items()},
                 title=f"Next-step success on the states reached by "
                       f"{results['recovery'].get('reference')}",
                 xlabel="wrong passages in the state's history (states)",
                 ylabel="% next-step success"),
    ]


def write_chain_report(out: PathLike, config: Mapping[str, Any],
                       results: Mapping[str, Any]) -> list[Path]:
    """Write the report folder ``out`` whole (replacing an older one) or not at all; the
    paths of its files."""
    out = Path(out)
    with atomic_directory(out) as tmp:
        write_results(tmp / "results.json", config, results)
        write_text(tmp / "report.md", report_markdown(config, results))
        write_plots(tmp, results)
    return [out / name for name in REPORT_FILES]


__all__ = ["REPORT_FILES", "bar_figure", "line_figure", "report_markdown",
           "write_chain_report", "write_plots"]
