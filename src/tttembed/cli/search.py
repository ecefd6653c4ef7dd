"""``tttembed search``: encode queries, search an index, write a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_bar, quiet_libraries


def load_query_source(queries: Path, split: str | None) -> tuple[dict[str, str], dict | None, str]:
    """Queries from a file, or a BEIR folder's split (then with its qrels)."""
    if queries.is_dir():
        from tttembed.data.beir import load_task

        task = load_task(queries, split=split)
        return task.queries, (task.qrels or None), task.name
    from tttembed.data.queries import load_queries

    return load_queries(queries), None, queries.stem


@handle_errors
def search(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index directory from 'tttembed index'.")],
    queries: Annotated[Path, typer.Option("--queries", "-q", help="Query file (.jsonl, .tsv, .txt) or a BEIR folder (its --split queries; qrels give metrics).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run file to write (.trec or .jsonl).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Results per query.")] = 100,
    fmt: Annotated[Optional[str], typer.Option("--format", help="trec or jsonl (default: from the file name).")] = None,
    split: Annotated[str, typer.Option(help="Split to use when --queries is a BEIR folder.")] = "test",
    batch_size: Annotated[int, typer.Option(min=1, help="Queries encoded per batch.")] = 256,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory.")] = None,
) -> None:
    """Search an index with raw query vectors."""
    quiet_libraries()
    from tttembed import api

    qmap, qrels, name = load_query_source(queries, split)
    handle = api.open_index(index)
    emb = api.embedder_for_index(handle, cache_dir=cache_dir)
    with progress_bar("encoding queries", total=len(qmap)) as advance:
        result = api.search(handle, qmap, embedder=emb, k=top_k, batch_size=batch_size,
                            progress=advance)
    run = result.to_run()
    t = result.timings
    console.print(f"searched {len(qmap):,} queries (top {top_k}): encode {t['encode_s']:.2f}s, "
                  f"search {t['search_s']:.3f}s")
    if out is not None:
        api.write_run(run, out, fmt)
        console.print(f"wrote {out}")
    if qrels:
        from tttembed.cli.report import print_metrics

        print_metrics({name: (qrels, run)}, title="raw search")
    if out is None and not qrels:
        for qid in list(run)[:5]:
            top = sorted(run[qid].items(), key=lambda kv: -kv[1])[:3]
            console.print(f"{qid}: " + ", ".join(f"{d} ({s:.3f})" for d, s in top))
