"""``tttembed search``: encode queries, search an index (raw or adapted), write runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_bar, quiet_libraries


@handle_errors
def search(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index directory from 'tttembed index'.")],
    queries: Annotated[list[Path], typer.Option("--queries", "-q", help="Query file (.jsonl, .tsv, .txt) or a BEIR folder (its --split queries; qrels give metrics). Repeatable: one task each.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run file to write (.trec or .jsonl); with several tasks, one file per task.")] = None,
    state: Annotated[Optional[list[Path]], typer.Option("--state", "-s", help="Learned state file(s) (vectors.npz). Query-wise states apply by query, task-wise by task name, global to all; the most specific wins.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Results per query.")] = 100,
    fmt: Annotated[Optional[str], typer.Option("--format", help="trec or jsonl (default: from the file name).")] = None,
    split: Annotated[str, typer.Option(help="Split to use when --queries is a BEIR folder.")] = "test",
    task: Annotated[Optional[list[str]], typer.Option(help="Task name per --queries source (default: folder name or file stem); task-wise states are looked up by it.")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Queries encoded per batch.")] = 256,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory.")] = None,
) -> None:
    """Search an index with raw or adapted query vectors (the index never changes)."""
    quiet_libraries()
    import time

    from tttembed import api
    from tttembed.adapt import load_state
    from tttembed.cli._inputs import load_query_sources
    from tttembed.index.search import encode_queries
    from tttembed.ttt.learn import adapted_search
    from tttembed.ttt.queries import QuerySet, run_from_arrays

    qmap, qrels, _ = load_query_sources(queries, split, task)
    handle = api.open_index(index)
    states = [load_state(p, expected_identity=handle.identity, expected_dim=handle.dim)
              for p in state or []]
    emb = api.embedder_for_index(handle, cache_dir=cache_dir)
    qs = QuerySet.from_tasks(qmap)
    t0 = time.perf_counter()
    with progress_bar("encoding queries", total=len(qs)) as advance:
        x = encode_queries(emb, list(qs.texts), batch_size, progress=advance)
    t1 = time.perf_counter()
    scores, rows = adapted_search(handle, qs, x, states, top_k)
    t2 = time.perf_counter()
    runs = run_from_arrays(qs, handle, rows, scores)
    kind = "adapted (" + ", ".join(f"{s.scope}-wise" for s in states) + ")" if states else "raw"
    console.print(f"searched {len(qs):,} queries, {kind}, top {top_k}: encode {t1 - t0:.2f}s, "
                  f"search {t2 - t1:.3f}s")
    if out is not None:
        for name, run in runs.items():
            path = out if len(runs) == 1 else out.with_name(f"{out.stem}.{name}{out.suffix}")
            api.write_run(run, path, fmt)
            console.print(f"wrote {path}")
    if qrels:
        from tttembed.cli.report import print_metrics

        print_metrics({t: (qrels[t], runs[t]) for t in runs if t in qrels}, title=f"{kind} search")
    if out is None and not qrels:
        for name, run in runs.items():
            for qid in list(run)[:5]:
                top = sorted(run[qid].items(), key=lambda kv: -kv[1])[:3]
                console.print(f"{name}/{qid}: " + ", ".join(f"{d} ({s:.3f})" for d, s in top))
