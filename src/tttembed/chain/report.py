"""The chain evaluation report folder: results.json, report.md and three PNG plots.

The folder is built in a temporary sibling and swapped in with one rename
(``core.io.atomic_directory``): a failure midway leaves the previous report (or nothing),
never a partial one. Rates in these files are percentages (0-100), as in the published
``docs/results-chain`` tables; the console tables show them as fractions (0-1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.chain.analysis import WRONG_BUCKETS
from tttembed.core.io import atomic_directory, write_text
from tttembed.reporting import bar_plot, line_plot, markdown_table, write_results
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
            "## Retrieval (%)", "", markdown_table(headers, rows)]


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
                             [[name] + [f"{v[b]['rate']} (n={v[b]['n']})" for b in WRONG_BUCKETS]
                              for name, v in rec["by_encoder"].items()]))
    dele = {k: v for k, v in results["deletion"].items() if k != "reference"}
    md += ["", "## Deletion counterfactual (states with a wrong passage)", ""]
    md.append(markdown_table(["encoder", "states", "as reached", "wrong deleted", "cost"],
                             [[k, v["n"], v["original"], v["deleted"], v["cost"]]
                              for k, v in dele.items()]))
    md += ["", "![completeness](completeness.png) ![mismatch](mismatch.png) "
           "![recovery](recovery.png)", ""]
    return "\n".join(md)


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
                 title="Complete evidence in the top k", ylabel="%"),
        line_plot(folder / "mismatch.png", steps, shares,
                  title="States holding a wrong passage", xlabel="step",
                  ylabel="% of states missing gold"),
        bar_plot(folder / "recovery.png", list(WRONG_BUCKETS),
                 {n: [v[b]["rate"] for b in WRONG_BUCKETS] for n, v in rec.items()},
                 title="Next-step success by wrong passages", ylabel="%"),
    ]


def write_report(out: PathLike, config: Mapping[str, Any],
                 results: Mapping[str, Any]) -> list[Path]:
    """Write the report folder ``out`` whole (replacing an older one) or not at all; the
    paths of its files."""
    out = Path(out)
    with atomic_directory(out) as tmp:
        write_results(tmp / "results.json", config, results)
        write_text(tmp / "report.md", report_markdown(config, results))
        write_plots(tmp, results)
    return [out / name for name in REPORT_FILES]


__all__ = ["REPORT_FILES", "report_markdown", "write_plots", "write_report"]
