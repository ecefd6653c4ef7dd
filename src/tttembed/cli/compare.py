"""``tttembed compare``: two run files on one set of judgments, paired (ranx's ``compare``
convention, our own paired tests), and the raw-vs-adapted table ``search`` prints.

One row per metric: both means, the paired difference (B - A), its 95% bootstrap interval
and the two-sided paired randomization p-value (:mod:`tttembed.metrics.stats`), over the
judged queries both runs answer: a judged query one run lacks is left out of both means
(never scored 0 in one of them), and how many each run lacks is printed. An empty run is
refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from tttembed.cli._common import console, emit_json, handle_errors, legend, split_list
from tttembed.cli._options import IdenticalIdsOpt, JsonOpt, MetricsOpt, ResamplesOpt
from tttembed.types import Qrels, Run

DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10")


def paired_rows(qrels: Qrels, run_a: Run, run_b: Run, metrics: Sequence[str],
                n_resamples: int = 10000, names: tuple[str, str] = ("A", "B")
                ) -> list[dict[str, Any]]:
    """One dict per metric: ``metric, a, b, delta (b - a), ci_low, ci_high, p_value, n``
    over the judged queries both runs answer, and ``lacks_a`` / ``lacks_b``: the judged
    queries each run lacks (left out of both means). A run that answers none of the judged
    queries is refused (:class:`DataError`)."""
    from tttembed.core.errors import DataError
    from tttembed.metrics.ranking import evaluated_queries, per_query_metrics
    from tttembed.metrics.stats import compare

    judged = evaluated_queries(qrels)
    answers = [{q for q in judged if run.get(q)} for run in (run_a, run_b)]
    for name, answered in zip(names, answers):
        if not answered:
            raise DataError(f"run {name} answers none of the {len(judged)} judged queries "
                            "(an empty run, or another query set): nothing to compare",
                            fix="check that the run and the judgments are of the same queries")
    common = [q for q in judged if q in answers[0] and q in answers[1]]
    if not common:
        raise DataError(f"runs {names[0]} and {names[1]} answer no judged query in common",
                        fix="check that both runs are of the same queries")
    pa = per_query_metrics(qrels, run_a, metrics)
    pb = per_query_metrics(qrels, run_b, metrics)
    rows = []
    for m in metrics:
        c = compare({q: pb[m][q] for q in common}, {q: pa[m][q] for q in common},
                    n_resamples=n_resamples)
        rows.append({"metric": m, "a": c.mean_b, "b": c.mean_a, "delta": c.delta,
                     "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
                     "n": c.n, "judged": len(judged),
                     "lacks_a": len(judged) - len(answers[0]),
                     "lacks_b": len(judged) - len(answers[1])})
    return rows


def print_paired(rows: Sequence[Mapping[str, Any]], names: tuple[str, str], title: str) -> None:
    """The paired table: metric | A | B | B - A | 95% CI | p | queries."""
    table = Table(title=title)
    for col in ("metric", names[0], names[1], f"{names[1]} - {names[0]}", "95% CI", "p",
                "queries"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for r in rows:
        table.add_row(r["metric"], f"{r['a']:.4f}", f"{r['b']:.4f}", f"{r['delta']:+.4f}",
                      f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", _p(r["p_value"]),
                      str(r["n"]))
    console.print(table)
    lacks = [(n, rows[0].get(f"lacks_{k}", 0)) for n, k in zip(names, "ab")] if rows else []
    if any(count for _, count in lacks):
        console.print(f"over the {rows[0]['n']} of {rows[0]['judged']} judged queries both "
                      "runs answer; " + ", ".join(f"{n} lacks {c}" for n, c in lacks) +
                      " (left out of both means)")
    console.print(f"{legend([r['metric'] for r in rows])}; {names[1]} - {names[0]}: paired "
                  "difference of the means, "
                  "95% CI: paired bootstrap, p: two-sided paired randomization test; "
                  "queries: judged queries both runs answer", style="dim")


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def metric_names(values: Optional[list[str]]) -> tuple[str, ...]:
    """``--metrics`` (comma-separated or repeated; trec_eval names too), checked."""
    from tttembed.metrics.ranking import parse_metric

    names = split_list(values) or DEFAULT_METRICS
    for name in names:
        parse_metric(name)
    return names


@handle_errors
def compare_command(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="Baseline run file (.trec or .jsonl).", show_default=False)],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="Run file compared with RUN_A (.trec or .jsonl).", show_default=False)],
    qrels: Annotated[Path, typer.Option("--qrels", help="Judgments (BEIR qrels TSV: query-id, corpus-id, score; or TREC qrels: qid 0 doc grade).", show_default=False)],
    metrics: MetricsOpt = None,
    n_resamples: ResamplesOpt = 10000,
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare two run files on one set of judgments: means, paired difference, interval, p."""
    from tttembed.data.beir import load_judgments
    from tttembed.index.search import read_run

    names = metric_names(metrics)
    judgments = load_judgments(qrels)
    a, b = read_run(run_a), read_run(run_b)
    identical, why = qrels_identical_rule(qrels, ignore_identical_ids)
    if identical:
        from tttembed.metrics.ranking import drop_identical

        a, b = drop_identical(a), drop_identical(b)
    rows = paired_rows(judgments, a, b, names, n_resamples, (f"A ({run_a})", f"B ({run_b})"))
    if as_json:
        emit_json({"run_a": str(run_a), "run_b": str(run_b), "qrels": str(qrels),
                   "ignore_identical_ids": identical, "metrics": rows})
        return
    print_paired(rows, ("A", "B"), f"A = {run_a}, B = {run_b}")
    console.print(f"ignore_identical_ids: {'on' if identical else 'off'} ({why})", style="dim")


def qrels_identical_rule(qrels: Path, given: Optional[bool]) -> tuple[bool, str]:
    """Whether a document whose id is the query id is left out of the runs: as given, else
    as the BEIR folder that holds ``qrels`` (``<folder>/qrels/<split>.tsv``) says."""
    from tttembed.data.beir import identical_ids_rule

    if given is not None:
        return given, "--ignore-identical-ids" if given else "--keep-identical-ids"
    parent = qrels.resolve().parent
    if parent.name != "qrels":
        return False, "off: the judgments are not in a BEIR folder's qrels/"
    return identical_ids_rule(parent.parent, parent.parent.name)
