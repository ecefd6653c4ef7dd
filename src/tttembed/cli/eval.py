"""``tttembed eval``: budget curves, transfer protocols and ablations on real tasks.

Registered by ``cli/__init__.py`` as ``app.command("eval")(eval_command)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from tttembed.cli._common import (
    LEGEND,
    console,
    emit_json,
    err_console,
    handle_errors,
    json_mode,
    progress_group,
    quiet_libraries,
    split_list,
    timing_table,
)
from tttembed.cli._options import (
    CacheOpt,
    ConcurrencyOpt,
    EmbedderOpt,
    ExecutorOpt,
    IdenticalIdsOpt,
    JsonOpt,
    MaxRetriesOpt,
    OverwriteOpt,
    QuietOpt,
    RayActorsOpt,
    RayAddressOpt,
    RayGpusOpt,
    RpmOpt,
    TimeoutOpt,
    ray_executor,
)
from tttembed.embed.base import DEFAULT_EMBEDDER


def _floats(values: list[str] | None, name: str) -> tuple[float, ...]:
    out = []
    for x in split_list(values):
        try:
            out.append(float(x))
        except ValueError:
            raise typer.BadParameter(f"{x!r} is not a number", param_hint=name) from None
    return tuple(out)


def print_tables(report: Any) -> None:
    """One rich table per scorer and protocol (the rows of report.md, on the 0-1 scale)."""
    from tttembed.cli.search import print_identical

    result = report.data
    print_identical({t["name"]: t.get("ignore_identical_ids_why") or "on" for t in
                     result["tasks"] if t.get("ignore_identical_ids")})
    for s in result["sections"]:
        for note in s["notes"]:
            console.print(f"[yellow]note:[/] {note}")
    for title, head, rows in report.tables():
        table = Table(title=title)
        for i, h in enumerate(head):
            table.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            table.add_row(*r)
        console.print(table)
    for s in result["sections"]:
        if s["aubc"]:
            console.print(f"AUBC [{s['scorer']}]: " + ", ".join(
                f"{m} {v:+.4f}" for m, v in sorted(s["aubc"].items(), key=lambda kv: -kv[1])))
        if s["loto_mean_delta"] is not None:
            console.print(f"LOTO mean delta nDCG@10 [{s['scorer']}]: {s['loto_mean_delta']:+.4f}")
        if s.get("reward_quality"):
            from tttembed.metrics.quality import reward_auc_line

            console.print(f"reward quality [{s['scorer']}]: " + "; ".join(
                reward_auc_line(q) for q in s["reward_quality"]))
        for task, fit in (s.get("qdrant_rf") or {}).items():
            console.print(f"qdrant-rf [{s['scorer']}] {task} ({fit['source']}, "
                          f"{fit['pairs']} fitting pairs): " + ", ".join(
                              f"{h}: a={c['a']:.3g} b={c['b']:.3g} c={c['c']:.3g}"
                              for h, c in fit["fits"].items()))
        if s["alpha_regret"]:
            console.print(f"alpha regret [{s['scorer']}]: " + ", ".join(
                f"{a} {v:.4f}" for a, v in s["alpha_regret"]["regret"].items()))
    console.print(LEGEND + "; b = rewards per query; alpha = n/(n+1), n = rewarded queries "
                  "behind a vector; p [CI] = paired randomisation p-value and 95% bootstrap "
                  "interval of the difference", style="dim")
    few = [t["name"] for t in result["tasks"] if t["few_queries"]]
    if few:
        console.print(f"[yellow]few queries:[/] {', '.join(few)} (treat their numbers as noisy)")
    c = result["counts"]
    console.print(f"embedding model calls {c['embedding_model_calls']}, scorer calls (paid "
                  f"pairs) {c['scorer_paid']}, cells cached {c['cells_cached']}, computed "
                  f"{c['cells_computed']}")
    timing_table(result["timings_s"])


@handle_errors
def eval_command(
    tasks: Annotated[list[str], typer.Argument(metavar="TASKS", help="Tasks: BEIR folder paths, or folder names under --data-root / $TTTEMBED_DATA, or mteb:NAME (comma-separated or several).", show_default=False)],
    scorer: Annotated[Optional[list[str]], typer.Option("--scorer", "-s", help="Reward scorer spec(s): bm25, qrels (transfer protocols only), noisy-qrels:?sigma=S&seed=N&flip=P (judgments plus known noise: a controlled simulation, also in the fixed protocol), qwen3-reranker:PATH, cross-encoder:PATH, llm:MODEL@URL. Repeat to compare. [default: bm25]")] = None,
    embedder: EmbedderOpt = DEFAULT_EMBEDDER,
    scope: Annotated[str, typer.Option("--scope", help="Comma-separated scopes: global,task,query.")] = "global,task,query",
    budget: Annotated[Optional[list[str]], typer.Option("--budget", "-b", help="Normalised budgets b (pairs per query), comma-separated; default the METHOD.md grid 0.01..100.")] = None,
    protocol: Annotated[Optional[list[str]], typer.Option("--protocol", "-p", help="fixed, heldout, loto (comma-separated or repeated). [default: fixed]")] = None,
    analysis: Annotated[Optional[list[str]], typer.Option("--analysis", "-a", help="alpha, breadth-depth, objectives.")] = None,
    baselines: Annotated[str, typer.Option(help="Comma-separated baselines: direct,prf-avg,prf-rocchio,rw-rocchio; also qdrant-rf (Qdrant 1.17 relevance feedback, naive strategy, coefficients fitted per task; opt-in: its fit scores 50 pairs per fitting query).")] = "direct,prf-avg,prf-rocchio,rw-rocchio",
    objective: Annotated[str, typer.Option(help="kd, rkl or grpo.")] = "kd",
    data_root: Annotated[Optional[Path], typer.Option(help="Folder holding the BEIR task folders named in TASKS (default $TTTEMBED_DATA; no other folder is guessed).")] = None,
    split: Annotated[str, typer.Option(help="Evaluated split.")] = "test",
    train_split: Annotated[Optional[str], typer.Option(help="Held-out protocol: learn from this split's judged queries where a task has it (e.g. SciFact train), evaluate all test queries.")] = None,
    heldout_fraction: Annotated[float, typer.Option(min=0.01, max=0.99, help="Share of queries rewarded in the held-out protocol.")] = 0.8,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Report folder: results.json, per_query.json, report.md and PNG plots, written whole.")] = None,
    n_resamples: Annotated[int, typer.Option("--n-resamples", "--resamples", min=10, help="Resamples of the paired tests.")] = 10000,
    cache_dir: CacheOpt = None,
    no_cell_cache: Annotated[bool, typer.Option("--no-cell-cache", help="Recompute every learned state and metric (embeddings and rewards still come from their caches).")] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the PNG plots.")] = False,
    alpha: Annotated[str, typer.Option("--alpha", help="Alpha methods of the TTT scopes, comma-separated: rule (n/(n+1), the published default) and/or auto (chosen by reward cross-validation; methods named <scope>-auto).")] = "rule",
    select: Annotated[str, typer.Option("--select", help="auto: add the method row 'auto', per task (and budget) the deployable state the validation says helps, as learn --method auto; its B counts its validation pairs. Empty (default): none.")] = "",
    allocation: Annotated[str, typer.Option("--allocation", help="How each budget's pairs are chosen, comma-separated: waterfill (the protocol's task-balanced water-filling) and optionally active (rounds: judged answers so far steer the next pairs, deeper or to corpus neighbours outside the top 100; every TTT method again as <method>@active at the same B).")] = "waterfill",
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    concurrency: ConcurrencyOpt = None,
    rpm: RpmOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_actors: RayActorsOpt = 1,
    ray_gpus: RayGpusOpt = 0.0,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate TTT-Embed against raw retrieval, direct reranking and PRF baselines."""
    quiet_libraries()
    from tttembed import api
    task_list = split_list(tasks)
    if not task_list:
        raise typer.BadParameter("give at least one task", param_hint="TASKS")
    plots = _check_out(out, overwrite, no_plots)  # before the work
    options = _built_options(api.HttpLimits(timeout, max_retries, concurrency, rpm),
                             ray_executor(executor, ray_address, ray_actors, ray_gpus),
                             allocation, ignore_identical_ids, budget)
    _say_grid(task_list, options, (scorer, scope, protocol, alpha, select, baselines), data_root, (split, train_split), heldout_fraction)
    with json_mode(as_json), progress_group(not quiet) as stage:
        report = api.evaluate(task_list, scorers=split_list(scorer) or ("bm25",),
                              embedder=embedder, scopes=split_list([scope]),
                              protocols=split_list(protocol) or ("fixed",),
                              analyses=split_list(analysis), baselines=split_list([baselines]),
                              objective=objective, split=split, train_split=train_split,
                              heldout_fraction=heldout_fraction, data_root=data_root,
                              cache_dir=cache_dir, n_resamples=n_resamples,
                              use_cell_cache=not no_cell_cache, alphas=split_list([alpha]),
                              selects=split_list([select]) if select else (),
                              progress=stage, **options)
    _finish(report, out, plots=plots, overwrite=overwrite, as_json=as_json)
    if out is not None and not no_plots and not plots:
        err_console.print(f"note: {SKIPPED}")


def _say_grid(tasks: Sequence[str], options: dict[str, Any], flags: tuple[Any, ...],
              data_root: Optional[Path], splits: tuple[str, Optional[str]],
              fraction: float) -> None:
    """Before the work: the grid and the judge pairs it may pay (on stderr). ``flags``:
    --scorer, --scope, --protocol, --alpha, --select and --baselines as given; ``splits``:
    --split and --train-split."""
    from tttembed.adapt.allocate import NORMALISED_BUDGETS
    from tttembed.evaluation.config import check_label_scorer
    from tttembed.evaluation.grid import count_task, grid_lines, methods_per_budget
    from tttembed.score.base import uses_labels

    scorer, scope, protocol, alpha, select, baselines = flags
    grid = {"scorers": split_list(scorer) or ("bm25",), "scopes": split_list([scope]),
            "protocols": split_list(protocol) or ("fixed",), "alphas": split_list([alpha]),
            "selects": split_list([select]) if select else (),
            "baselines": split_list([baselines])}
    for spec in grid["scorers"]:
        check_label_scorer(spec)  # a refused spec: its one line, not the grid first
    methods = {p: methods_per_budget(grid["scopes"], grid["alphas"], grid["selects"],
                                     options["allocation"], grid["baselines"], p)
               for p in grid["protocols"]}
    for line in grid_lines(
            budgets=options.get("budgets", NORMALISED_BUDGETS),
            budget_given="budgets" in options, scopes=grid["scopes"], methods=methods,
            protocols=grid["protocols"],
            sizes=[count_task(t, data_root, *splits) for t in tasks],
            scorers={s: not _label_scorer(s, uses_labels) for s in grid["scorers"]},
            fraction=fraction):
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _label_scorer(spec: str, uses_labels: Any) -> bool:
    try:
        return bool(uses_labels(spec))
    except Exception:  # noqa: BLE001  (an unknown scheme is refused by evaluate itself)
        return False


def _built_options(limits: Any, executor: Any, allocation: str,
                   ignore_identical_ids: Optional[bool], budget: Optional[list[str]]
                   ) -> dict[str, Any]:
    """The keywords of ``evaluate`` that flags build: the HTTP limits, the executor, the
    allocations, identical ids, and the budget grid when ``--budget`` gives one."""
    options: dict[str, Any] = dict(limits=limits, executor=executor,
                                   allocation=split_list([allocation]),
                                   ignore_identical_ids=ignore_identical_ids)
    if grid := _floats(budget, "--budget"):
        options["budgets"] = grid
    return options


def _check_out(out: Optional[Path], overwrite: bool, no_plots: bool) -> bool:
    """Before the work: refuse an existing --out without --overwrite; whether the plots
    can be drawn (False, with a note, when matplotlib is missing)."""
    from tttembed.core.errors import ConfigError

    if out is not None and out.exists() and not overwrite:
        raise ConfigError(f"report folder {out} already exists; pass --overwrite to "
                          "replace it, or choose another --out")
    return out is not None and not no_plots and _plots_possible()


#: What ``eval --out`` says when matplotlib is missing (before the work, and at its end).
SKIPPED = ("matplotlib is not installed: the plots are skipped; results.json and report.md "
           "are written (pip install 'tttembed[report]' for the plots)")


def _plots_possible() -> bool:
    """Whether matplotlib imports (checked before the work; a note when it does not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        err_console.print(f"note: {SKIPPED}")
        return False
    return True


def _finish(report: Any, out: Optional[Path], *, plots: bool, overwrite: bool,
            as_json: bool) -> None:
    """The tables (stderr with --json), the report folder, the JSON document."""
    with json_mode(as_json):
        print_tables(report)
        if out is not None:
            written = report.write(out, plots=plots, overwrite=overwrite)
            console.print(f"wrote {', '.join(str(p) for p in written)}")
    if as_json:
        emit_json(report.data)
