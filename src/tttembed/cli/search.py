"""``tttembed search``: encode queries, search an index (raw or adapted), write runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import (
    console,
    handle_errors,
    index_embedder,
    print_metrics,
    progress_group,
    quiet_libraries,
)
from tttembed.cli._options import (
    CacheOpt,
    IndexOpt,
    MaxRetriesOpt,
    OverwriteOpt,
    QueriesArg,
    QuietOpt,
    SplitOpt,
    TaskOpt,
    TimeoutOpt,
    TopKOpt,
)
from tttembed.core.io import refuse_existing


def write_runs(runs: dict, out: Path, fmt: Optional[str], overwrite: bool) -> None:
    """One run file, or one per task (task name appended) when there are several."""
    from tttembed import api

    for name, run in runs.items():
        path = out if len(runs) == 1 else out.with_name(f"{out.stem}.{name}{out.suffix}")
        api.write_run(run, path, fmt, overwrite=overwrite)
        console.print(f"wrote {path}")


def report_result(result: Any, out: Optional[Path], fmt: Optional[str], overwrite: bool,
                  title: str) -> dict:
    """Write the runs (when asked) and print metrics for the tasks that came with qrels."""
    runs = result.runs()
    if out is not None:
        write_runs(runs, out, fmt, overwrite)
    if result.qrels:
        print_metrics({t: (result.qrels[t], runs[t]) for t in runs if t in result.qrels},
                      title=title)
    return runs


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
) -> None:
    """Search an index with raw or adapted query vectors (the index never changes)."""
    quiet_libraries()
    from tttembed import api

    if out is not None:
        refuse_existing(out, overwrite, "run file")  # before the search, not after

    handle = api.open_index(index)
    emb = index_embedder(handle, cache_dir, timeout, max_retries)
    with progress_group(not quiet) as stage:
        result = api.search(handle, queries, k=top_k, states=state or [], task=task,
                            split=split, embedder=emb, allow_foreign_state=allow_foreign_state,
                            allow_foreign_corpus=allow_foreign_corpus, batch_size=batch_size,
                            progress=stage)
    kind = ("adapted (" + ", ".join(f"{s.scope}-wise" for s in result.applied) + ")"
            if result.applied else "raw")
    console.print(f"searched {len(result.qids):,} queries, {kind}, top {top_k}: encode "
                  f"{result.timings['encode_s']:.2f} s, search {result.timings['search_s']:.3f} s")
    for st, n in result.applied.items():
        console.print(f"state {st.label} ({st.scope}-wise): applied to {n:,} of "
                      f"{len(result.qids):,} queries")
    for st, n in result.leaked.items():
        console.print(f"note: {n:,} of these judged queries rewarded {st.label} with their "
                      f"own judgments ({st.scorer}): adapted metrics on them are not a "
                      "held-out result (evaluate on other queries, or use tttembed eval)")
    leak = " - LABEL LEAK: judged queries rewarded the state" if result.leaked else ""
    runs = report_result(result, out, fmt, overwrite, f"{kind} search{leak}")
    if out is None and not result.qrels:
        for name, run in runs.items():
            for qid in list(run)[:5]:
                top = sorted(run[qid].items(), key=lambda kv: -kv[1])[:3]
                console.print(f"{name}/{qid}: " + ", ".join(f"{d} ({s:.3f})" for d, s in top))
