"""``tttembed search``: encode queries, search an index (raw or adapted), write runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import (
    console,
    emit_json,
    handle_errors,
    http_embedder_for_index,
    json_mode,
    print_metrics,
    progress_group,
    quiet_libraries,
)
from tttembed.cli._options import (
    CacheOpt,
    IdenticalIdsOpt,
    IndexOpt,
    JsonOpt,
    MaxRetriesOpt,
    MetricsOpt,
    OverwriteOpt,
    QueriesArg,
    QuietOpt,
    ResamplesOpt,
    RunTagOpt,
    SplitOpt,
    TaskOpt,
    TimeoutOpt,
    TopKOpt,
)
from tttembed.cli.compare import metric_names, paired_rows, print_paired
from tttembed.core.io import refuse_existing


def write_runs(runs: dict, out: Path, fmt: Optional[str], overwrite: bool,
               tag: str = "tttembed") -> list[Path]:
    """One run file, or one per task (task name appended) when there are several."""
    from tttembed import api

    paths = []
    for name, run in runs.items():
        path = out if len(runs) == 1 else out.with_name(f"{out.stem}.{name}{out.suffix}")
        api.write_run(run, path, fmt, tag=tag, overwrite=overwrite)
        console.print(f"wrote {path}")
        paths.append(path)
    return paths


def raw_beside_adapted(raw: Any, adapted: Any, metrics: tuple[str, ...], n_resamples: int,
                       leak: str, name: str = "adapted") -> dict[str, list[dict[str, Any]]]:
    """Per judged task: raw and adapted (or reranked: ``name``) metrics with the paired
    difference, its interval and p-value (the adapted result is never shown alone)."""
    raw_runs, runs = raw.runs(), adapted.runs()
    out = {}
    for task, qrels in adapted.qrels.items():
        if task in runs:
            out[task] = paired_rows(qrels, raw_runs[task], runs[task], metrics, n_resamples,
                                    ("raw", name))
            print_paired(out[task], ("raw", name), f"{task}: raw vs {name}{leak}")
    return out


@handle_errors
def search(
    queries: QueriesArg,
    index: IndexOpt,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run file to write (.trec or .jsonl); with several tasks, one file per task.")] = None,
    state: Annotated[Optional[list[Path]], typer.Option("--state", help="Learned state file(s) (vectors.npz). Query-wise states apply by query, task-wise by task name, global to all; the most specific wins.")] = None,
    top_k: TopKOpt = 100,
    fmt: Annotated[Optional[str], typer.Option("--format", help="trec or jsonl (default: from the file name).")] = None,
    split: SplitOpt = "test",
    task: TaskOpt = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Queries encoded per batch.")] = 256,
    allow_foreign_state: Annotated[bool, typer.Option("--allow-foreign-state", help="Apply states learned on another corpus than the index's.")] = False,
    allow_foreign_corpus: Annotated[bool, typer.Option("--allow-foreign-corpus", help="Search a BEIR folder's queries although its corpus.jsonl is not the index's corpus.")] = False,
    cache_dir: CacheOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    metrics: MetricsOpt = None,
    n_resamples: ResamplesOpt = 10000,
    run_tag: RunTagOpt = "tttembed",
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search an index with raw or adapted query vectors (the index never changes).

    With states and judged queries, raw and adapted metrics are printed side by side with
    the paired difference, its 95% interval and p-value."""
    quiet_libraries()
    from tttembed import api

    names = metric_names(metrics)
    if out is not None:
        refuse_existing(out, overwrite, "run file")  # before the search, not after

    handle = api.open_index(index)
    emb = http_embedder_for_index(handle, cache_dir, timeout, max_retries)
    options = dict(k=top_k, task=task, split=split, embedder=emb,
                   allow_foreign_corpus=allow_foreign_corpus, batch_size=batch_size,
                   ignore_identical_ids=ignore_identical_ids)
    with json_mode(as_json), progress_group(not quiet) as stage:
        result = api.search(handle, queries, states=state or [],
                            allow_foreign_state=allow_foreign_state, progress=stage, **options)
        raw = (api.search(handle, queries, **options)
               if result.applied and result.qrels else None)
        doc = _report(result, raw, top_k, out, fmt, overwrite, names, n_resamples, run_tag)
    if as_json:
        emit_json(doc)


def no_part_reason(state: Any) -> str:
    """Why a state (its tasks those of the queries) applied to none of them: it has no
    part for these texts, read from its manifest (a --method auto choice per task: the
    query-wise part applies only to the texts it was learned on, the shared part kept
    raw; or a query-wise state whose texts are other ones)."""
    sel = state.selection or {}
    learned = f"{len(state.rewarded):,} texts it was learned on"
    if sel:
        shared = sel.get("shared") or {}
        per_task = "; ".join(
            f"task {t}: chose {c}" + (", shared part raw" if shared.get(t) == "raw" else "")
            for t, c in (sel.get("choice") or {}).items())
        return (f"it has no part for these texts (its query parts apply only to the "
                f"{learned}; {per_task}): these queries keep their raw vectors")
    if state.scope == "query":
        return (f"it has no part for these texts (a query-wise state applies only to the "
                f"{learned}): these queries keep their raw vectors")
    return "no vector of it matches these queries: they keep their raw vectors"


def _report(result: Any, raw: Any, top_k: int, out: Optional[Path], fmt: Optional[str],
            overwrite: bool, names: tuple[str, ...], n_resamples: int, tag: str
            ) -> dict[str, Any]:
    used = [s for s, n in result.applied.items() if n]
    kind = "adapted (" + ", ".join(f"{s.scope}-wise" for s in used) + ")" if used else "raw"
    console.print(f"searched {len(result.qids):,} queries, {kind}, top {top_k}: encode "
                  f"{result.timings['encode_s']:.2f} s, search {result.timings['search_s']:.3f} s")
    print_identical(result.identical_why)
    shadowed = _shadowed(result)
    for st, n in result.applied.items():
        extra = f" (shadowed by {shadowed[st]})" if st in shadowed else ""
        why = "" if n or st in shadowed else f": {no_part_reason(st)}"
        console.print(f"state {st.label} ({st.scope}-wise): applied to {n:,} of "
                      f"{len(result.qids):,} queries{extra}{why}")
    for st, n in result.leaked.items():
        console.print(f"note: {n:,} of these judged queries have the text of a query whose "
                      f"judgments rewarded {st.label} ({st.scorer}): {OVERLAP}; adapted "
                      "metrics on them are not a held-out result (evaluate on other "
                      "queries, or use tttembed eval)")
    leak = _leak_banner(result)
    doc: dict[str, Any] = {
        "queries": len(result.qids), "kind": kind, "top_k": top_k, "timings_s": result.timings,
        "ignore_identical_ids": result.identical,
        "ignore_identical_ids_why": result.identical_why,
        "states": [{"file": st.label, "scope": st.scope, "applied": n,
                    "label_leak_queries": result.leaked.get(st, 0)}
                   for st, n in result.applied.items()],
        "label_leak": result.leak_qids}
    runs = result.runs()
    if out is not None:
        doc["runs"] = [str(p) for p in write_runs(runs, out, fmt, overwrite, tag)]
    if raw is not None:
        doc["paired"] = raw_beside_adapted(raw, result, names, n_resamples, leak)
        if result.leak_qids:
            doc["paired_without_label_leak"] = without_leak(raw, result, names, n_resamples)
    elif result.qrels:
        doc["metrics"] = print_metrics(
            {t: (result.qrels[t], runs[t]) for t in runs if t in result.qrels},
            title=f"{kind} search{leak}", metrics=names)
    if out is None and not result.qrels:
        for name, run in runs.items():
            for qid in list(run)[:5]:
                top = sorted(run[qid].items(), key=lambda kv: -kv[1])[:3]
                console.print(f"{name}/{qid}: " + ", ".join(f"{d} ({s:.3f})" for d, s in top))
        doc["top"] = {t: {q: sorted(r.items(), key=lambda kv: -kv[1])[:10]
                          for q, r in run.items()} for t, run in runs.items()}
    return doc


def print_identical(why: dict[str, str]) -> None:
    """``ignore_identical_ids: on for arguana (the benchmark's setting for task arguana)
    ...``: the tasks whose lists leave out the query's own document, and where each
    task's rule came from (nothing when it is off everywhere)."""
    by_reason: dict[str, list[str]] = {}
    for task, rule in why.items():
        if rule.startswith("on"):
            by_reason.setdefault(rule[len("on"):].strip(" ()"), []).append(task)
    if by_reason:
        on = "; ".join(", ".join(tasks) + (f" ({reason})" if reason else "")
                       for reason, tasks in by_reason.items())
        console.print(f"ignore_identical_ids: on for {on}: a retrieved document whose id is "
                      "the query id is left out, as BEIR and MTEB score it; "
                      "--keep-identical-ids keeps it")


#: How a label leak is found, in the words of the note under the banner.
OVERLAP = ("queries are matched by text, not by id, so the same text under another id "
           "counts (a data set that files one text under several ids leaks across a split "
           "made by id: split by text)")


def _leak_banner(result: Any) -> str:
    """`` - LABEL LEAK on 2 of 300 judged queries`` (and their ids printed once), or ""."""
    leaked = sum(len(q) for q in result.leak_qids.values())
    if not leaked:
        return ""
    tasks = result.tasks or [""] * len(result.qids)
    judged = sum(1 for t, q in zip(tasks, result.qids) if q in result.qrels.get(t, {}))
    ids = [q for qids in result.leak_qids.values() for q in qids]
    console.print("label-leak queries: " + ", ".join(ids[:10]) + (
        f", ... ({len(ids) - 10:,} more; --json lists them)" if len(ids) > 10 else ""))
    return (f" - LABEL LEAK on {leaked:,} of {judged:,} judged queries (their text is the "
            "text of a rewarded query)")


def without_leak(raw: Any, adapted: Any, metrics: tuple[str, ...], n_resamples: int
                 ) -> dict[str, list[dict[str, Any]]]:
    """Per judged task with label-leak queries: raw vs adapted again without them (the
    held-out figure beside the one with them); a task whose every judged query leaked
    has none, said so."""
    raw_runs, runs = raw.runs(), adapted.runs()
    out = {}
    for task, leaked in adapted.leak_qids.items():
        qrels = {q: j for q, j in adapted.qrels.get(task, {}).items() if q not in leaked}
        n = len(leaked)
        if task not in runs or not qrels:
            console.print(f"{task}: every judged query rewarded the state with its own "
                          "judgments: no held-out figure (evaluate on other queries)")
            continue
        out[task] = paired_rows(qrels, raw_runs[task], runs[task], metrics, n_resamples,
                                ("raw", "adapted"))
        print_paired(out[task], ("raw", "adapted"),
                     f"{task}: raw vs adapted without the {n:,} label-leak "
                     f"quer{'y' if n == 1 else 'ies'} (held out from the state's judgments)")
    return out


def _shadowed(result: Any) -> dict[Any, str]:
    """States that a more specific one shadows for some queries: the label of that one."""
    from tttembed.adapt.scopes import precedence

    states = list(result.applied)
    out = {}
    for st in states:
        finer = [o for o in states if precedence(o.scope) < precedence(st.scope)]
        if finer:
            out[st] = ", ".join(o.label for o in finer)
    return out
