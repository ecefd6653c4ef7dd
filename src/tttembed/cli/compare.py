"""``tttembed compare``: two or more run files on one set of judgments, paired (ranx's
``compare`` convention, our own paired tests), and the raw-vs-adapted table ``search`` prints.

One row per metric: both means, the paired difference (B - A), its 95% bootstrap interval
and the two-sided paired randomization p-value (:mod:`tttembed.metrics.stats`), over the
judged queries both runs answer: a judged query one run lacks is left out of both means
(never scored 0 in one of them), and how many each run lacks is printed. An empty run is
refused. More than two runs: every pair (as ranx's ``compare`` tests every pair), the
earlier run as A, and each metric's p-values corrected over the pairs (``--correction``:
Holm by default, Bonferroni or none; named in the output)."""

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


CorrectionOpt = Annotated[str, typer.Option("--correction", help="With three or more runs: the multiple-testing correction of each metric's p-values over the pairs of runs: holm (Holm's step-down, the default), bonferroni or none (raw p). Two runs make one test per metric: nothing to correct.")]


@handle_errors
def compare_command(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN...", help="Two or more run files (.trec or .jsonl). Two: B (the second) against A (the first, the baseline); more: every pair, the earlier run as A.", show_default=False)],
    qrels: Annotated[Path, typer.Option("--qrels", help="Judgments (BEIR qrels TSV: query-id, corpus-id, score; or TREC qrels: qid 0 doc grade).", show_default=False)],
    metrics: MetricsOpt = None,
    n_resamples: ResamplesOpt = 10000,
    correction: CorrectionOpt = "holm",
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare run files on one set of judgments: means, paired difference, interval, p
    (three or more: every pair, p corrected for testing them together)."""
    from tttembed.data.beir import load_judgments
    from tttembed.index.search import read_run
    from tttembed.types import CORRECTIONS

    if len(runs) < 2:
        raise typer.BadParameter("give at least two runs (RUN... : the baseline first)",
                                 param_hint="RUN...")
    if correction not in CORRECTIONS:
        raise typer.BadParameter(f"{correction!r} is not one of: {', '.join(CORRECTIONS)}",
                                 param_hint="--correction")
    names = metric_names(metrics)
    judgments = load_judgments(qrels)
    loaded = [read_run(r) for r in runs]
    identical, why = qrels_identical_rule(qrels, ignore_identical_ids)
    if identical:
        from tttembed.metrics.ranking import drop_identical

        loaded = [drop_identical(r) for r in loaded]
    warned = warn_runs(judgments, runs, loaded, qrels)
    if len(runs) > 2:
        many = compare_many(judgments, runs, loaded, names, n_resamples, correction)
        if as_json:
            emit_json({"runs": [str(r) for r in runs], "qrels": str(qrels),
                       "ignore_identical_ids": identical, "correction": correction,
                       "comparisons": many, "warnings": warned})
            return
        print_many(many, runs, correction)
        console.print(f"ignore_identical_ids: {'on' if identical else 'off'} ({why})",
                      style="dim")
        return
    run_a, run_b = runs
    rows = paired_rows(judgments, loaded[0], loaded[1], names, n_resamples,
                       (f"A ({run_a})", f"B ({run_b})"))
    if as_json:
        emit_json({"run_a": str(run_a), "run_b": str(run_b), "qrels": str(qrels),
                   "ignore_identical_ids": identical, "correction": correction,
                   "metrics": rows, "warnings": warned})
        return
    print_paired(rows, ("A", "B"), f"A = {run_a}, B = {run_b}")
    console.print(f"ignore_identical_ids: {'on' if identical else 'off'} ({why})", style="dim")


def compare_many(qrels: Qrels, paths: Sequence[Path], runs: Sequence[Run],
                 metrics: Sequence[str], n_resamples: int, correction: str
                 ) -> list[dict[str, Any]]:
    """Every pair of ``runs`` (the earlier as A): ``{run_a, run_b, metrics}`` with
    :func:`paired_rows`' rows, each with ``p_adjusted``: its metric's p-values corrected
    over the pairs (``correction``, :func:`tttembed.metrics.stats.adjust_p`)."""
    from tttembed.metrics.stats import adjust_p

    out: list[dict[str, Any]] = []
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            rows = paired_rows(qrels, runs[i], runs[j], metrics, n_resamples,
                               (f"A ({paths[i]})", f"B ({paths[j]})"))
            out.append({"run_a": str(paths[i]), "run_b": str(paths[j]), "position_a": i + 1,
                        "position_b": j + 1, "metrics": rows})
    for m in range(len(metrics)):
        adjusted = adjust_p([c["metrics"][m]["p_value"] for c in out], correction)
        for c, p in zip(out, adjusted):
            c["metrics"][m]["p_adjusted"] = p
    return out


CORRECTION_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni", "none": "none"}


def print_many(comparisons: Sequence[Mapping[str, Any]], paths: Sequence[Path],
               correction: str) -> None:
    """One table of every pair: metric | A | B | mean A | mean B | B - A | 95% CI | p |
    p corrected | queries; the runs named R1, R2, ... below it."""
    name = CORRECTION_NAMES[correction]
    table = Table(title="every pair of runs: " + ", ".join(
        f"R{i + 1} = {p}" for i, p in enumerate(paths)))
    for col in ("metric", "A", "B", "mean A", "mean B", "B - A", "95% CI", "p",
                f"p ({name})", "queries"):
        table.add_column(col, justify="left" if col in ("metric", "A", "B") else "right")
    for c in comparisons:
        for r in c["metrics"]:
            table.add_row(r["metric"], f"R{c['position_a']}", f"R{c['position_b']}", f"{r['a']:.4f}",
                          f"{r['b']:.4f}", f"{r['delta']:+.4f}",
                          f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", _p(r["p_value"]),
                          _p(r["p_adjusted"]), str(r["n"]))
    console.print(table)
    pairs = len(comparisons)
    how = ("not corrected (--correction none)" if correction == "none" else
           f"corrected over the {pairs} pairs of each metric ({name}"
           + ("'s step-down" if correction == "holm" else "") + ")")
    metrics = list(dict.fromkeys(r["metric"] for c in comparisons for r in c["metrics"]))
    console.print(f"{legend(metrics)}; {pairs} pairs, B - A: paired difference of the "
                  "means over the judged queries both runs answer, 95% CI: paired "
                  "bootstrap, p: two-sided paired randomization test, "
                  f"p ({name}): {how}", style="dim")


def repeated_runs(paths: Sequence[Path]) -> list[list[int]]:
    """The positions (1-based) of each file given more than once, as groups."""
    seen: dict[Path, list[int]] = {}
    for i, p in enumerate(paths):
        seen.setdefault(Path(p).resolve(), []).append(i + 1)
    return [group for group in seen.values() if len(group) > 1]


def unjudged_runs(qrels: Qrels, runs: Sequence[Run]) -> list[int]:
    """The positions (1-based) of the runs none of whose documents is in the judgments
    (a run of another corpus with the same query ids): every score of theirs is 0."""
    judged = {d for docs in qrels.values() for d in docs}
    return [i + 1 for i, run in enumerate(runs)
            if any(run.values()) and not any(d in judged for docs in run.values() for d in docs)]


def warn_runs(qrels: Qrels, paths: Sequence[Path], runs: Sequence[Run], where: Path
              ) -> list[str]:
    """Say (on stderr; returned for --json) a file given twice and a run none of whose
    documents is judged. Runs are named as the table names them: A and B, or R1, R2, ..."""
    label = (lambda i: "AB"[i - 1]) if len(paths) == 2 else (lambda i: f"R{i}")
    out = []
    for group in repeated_runs(paths):
        named = " and ".join(label(i) for i in group)
        out.append(f"{named} are the same file ({paths[group[0] - 1]}): they compare equal "
                   "by construction; give each run once")
    for i in unjudged_runs(qrels, runs):
        n = len({d for docs in runs[i - 1].values() for d in docs})
        out.append(f"{label(i)} ({paths[i - 1]}): none of its {n} documents is in the "
                   f"judgments {where}, so every score of it is 0 (a run of another "
                   "corpus?); compare runs of the corpus the judgments were made on")
    for line in out:
        typer.echo(f"warning: {line}", err=True)
    return out


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
