"""``tttembed eval``: budget curves, transfer protocols and ablations on real tasks.

Registered by ``cli/__init__.py`` as ``app.command("eval")(eval_command)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_group, quiet_libraries
from tttembed.embed.base import DEFAULT_EMBEDDER


def _split(values: list[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(out)


def _floats(values: list[str] | None, name: str) -> tuple[float, ...]:
    out = []
    for x in _split(values):
        try:
            out.append(float(x))
        except ValueError:
            raise typer.BadParameter(f"{x!r} is not a number", param_hint=name) from None
    return tuple(out)


def print_tables(result: dict[str, Any]) -> None:
    """One rich table per scorer and protocol (the same rows as report.md)."""
    from rich.table import Table

    from tttembed.evaluate.report import HEAD, TITLES, table_rows

    for s in result["sections"]:
        for note in s["notes"]:
            console.print(f"[yellow]note:[/] {note}")
        for proto, title in TITLES.items():
            rows = table_rows(s, proto)
            if not rows:
                continue
            table = Table(title=f"{title} — scorer {s['scorer']} (×100)")
            for i, h in enumerate(HEAD):
                table.add_column(h, justify="left" if i == 0 else "right")
            for r in rows:
                table.add_row(*r)
            console.print(table)
            if proto == "fixed" and s["aubc"]:
                console.print("AUBC (×100): " + ", ".join(
                    f"{m} {100 * v:+.2f}" for m, v in sorted(s["aubc"].items(),
                                                              key=lambda kv: -kv[1])))
            if proto == "loto" and s["loto_mean_delta"] is not None:
                console.print(f"LOTO mean Δ nDCG@10: {100 * s['loto_mean_delta']:+.2f}")
            if proto == "alpha" and s["alpha_regret"]:
                console.print("alpha regret (×100): " + ", ".join(
                    f"{a} {100 * v:.2f}" for a, v in s["alpha_regret"]["regret"].items()))
    few = [t["name"] for t in result["tasks"] if t["few_queries"]]
    if few:
        console.print(f"[yellow]few queries:[/] {', '.join(few)} (treat their numbers as noisy)")
    c = result["counts"]
    console.print(f"embedding model calls {c['embedding_model_calls']}, scorer calls (paid pairs) "
                  f"{c['scorer_paid']}, cells cached {c['cells_cached']}, computed "
                  f"{c['cells_computed']}; total {result['timings_s']['total']:.1f} s")


@handle_errors
def eval_command(
    tasks: Annotated[list[str], typer.Option("--tasks", "-t", help="Tasks: BEIR folder names under --data-root, paths, or mteb:NAME (comma-separated or repeated).")],
    scorer: Annotated[Optional[list[str]], typer.Option("--scorer", "-s", help="Reward scorer spec(s): bm25, qrels (transfer protocols only), qwen3-reranker:PATH, cross-encoder:PATH, llm:MODEL@URL. Repeat to compare.")] = None,
    embedder: Annotated[str, typer.Option(help="Embedder spec.")] = DEFAULT_EMBEDDER,
    scopes: Annotated[str, typer.Option(help="Comma-separated scopes: global,task,query.")] = "global,task,query",
    budgets: Annotated[Optional[list[str]], typer.Option(help="Normalised budgets b (pairs per query), comma-separated; default the METHOD.md grid 0.01..100.")] = None,
    protocol: Annotated[Optional[list[str]], typer.Option("--protocol", "-p", help="fixed, heldout, loto (comma-separated or repeated).")] = None,
    analysis: Annotated[Optional[list[str]], typer.Option("--analysis", "-a", help="alpha, breadth-depth, objectives.")] = None,
    baselines: Annotated[str, typer.Option(help="Comma-separated baselines: direct,prf-avg,prf-rocchio,rw-rocchio.")] = "direct,prf-avg,prf-rocchio,rw-rocchio",
    objective: Annotated[str, typer.Option(help="kd, rkl or grpo.")] = "kd",
    data_root: Annotated[Optional[Path], typer.Option(help="Folder holding the BEIR task folders (default $TTTEMBED_DATA or ../shared/data).")] = None,
    split: Annotated[str, typer.Option(help="Evaluated split.")] = "test",
    train_split: Annotated[Optional[str], typer.Option(help="Held-out protocol: learn from this split's judged queries where a task has it (e.g. SciFact train), evaluate all test queries.")] = None,
    heldout_fraction: Annotated[float, typer.Option(min=0.01, max=0.99, help="Share of queries rewarded in the held-out protocol.")] = 0.8,
    report: Annotated[Optional[Path], typer.Option(help="Write results.json, per_query.json, report.md and PNG plots here.")] = None,
    resamples: Annotated[int, typer.Option(min=10, help="Resamples of the paired tests.")] = 10000,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory (embeddings, indexes, ledger, cells).")] = None,
    no_cell_cache: Annotated[bool, typer.Option("--no-cell-cache", help="Recompute every learned state and metric (embeddings and rewards still come from their caches).")] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the PNG plots.")] = False,
) -> None:
    """Evaluate TTT-Embed against raw retrieval, direct reranking and PRF baselines."""
    quiet_libraries()
    from tttembed.adapt.allocate import NORMALISED_BUDGETS
    from tttembed.evaluate.report import write_report
    from tttembed.evaluate.runner import EvalConfig, run_eval

    task_list = _split(tasks)
    if not task_list:
        raise typer.BadParameter("give at least one task", param_hint="--tasks")
    grid = _floats(budgets, "--budgets") or NORMALISED_BUDGETS
    cfg = EvalConfig(tasks=task_list, embedder=embedder,
                     scorers=_split(scorer) or ("bm25",), scopes=_split([scopes]),
                     budgets=grid, protocols=_split(protocol) or ("fixed",),
                     analyses=_split(analysis), baselines=_split([baselines]),
                     objective=objective, split=split, train_split=train_split,
                     heldout_fraction=heldout_fraction,
                     data_root=str(data_root) if data_root else None,
                     cache_dir=str(cache_dir) if cache_dir else None, n_resamples=resamples)
    with progress_group() as stage:
        result = run_eval(cfg, stage=stage, use_cell_cache=not no_cell_cache)
    print_tables(result)
    if report is not None:
        written = write_report(result, report, plots=not no_plots)
        console.print(f"wrote {', '.join(str(p) for p in written)}")
