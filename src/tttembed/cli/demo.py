"""``tttembed demo``: the whole job offline on real text every machine has.

Corpus: the docstrings of this Python's standard library. Questions and graded labels:
shipped with tttembed (``examples/stdlib_docs``). Index, raw search, nDCG@10 table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_bar, quiet_libraries
from tttembed.embed.base import DEFAULT_EMBEDDER


@handle_errors
def demo(
    embedder: Annotated[str, typer.Option(help="Embedder spec.")] = DEFAULT_EMBEDDER,
    workdir: Annotated[Optional[Path], typer.Option(help="Where to write the demo index and runs (default: <cache>/demo).")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=10, help="Results per query.")] = 100,
) -> None:
    """Index the standard library's docstrings, search shipped questions, show nDCG@10."""
    quiet_libraries()
    from tttembed import api
    from tttembed.democorpus import demo_task
    from tttembed.paths import cache_dir as default_cache

    work = workdir or default_cache(cache_dir) / "demo"
    task = demo_task()
    corpus, queries, qrels, dropped = task.corpus, task.queries, task.qrels, task.dropped_labels
    console.print(f"corpus: {len(corpus):,} docstrings of this Python's standard library; "
                  f"{len(queries)} shipped questions with graded labels"
                  + (f" ({dropped} labels dropped: ids absent from this Python)" if dropped else ""))
    emb = api.load_embedder(embedder, cache_dir=cache_dir)
    with progress_bar("embedding corpus", total=len(corpus)) as advance:
        api.index_corpus(corpus, work / "index", embedder=emb, overwrite=True,
                         source="python-stdlib-docstrings", progress=advance)
    index = api.open_index(work / "index", embedder=emb)
    result = api.search(index, queries, embedder=emb, k=top_k)
    run = result.to_run()
    api.write_run(run, work / "raw.trec")
    from tttembed.cli.report import print_metrics

    print_metrics({"stdlib-docs": (qrels, run)}, title="raw search (bundled embedder)")
    console.print(f"model calls this run: {emb.model_calls} (0 when the cache is warm); "
                  f"index and run in {work}")
