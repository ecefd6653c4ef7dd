"""``tttembed index``: embed a corpus and write an index directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, parse_params, progress_bar, quiet_libraries
from tttembed.embed.base import DEFAULT_EMBEDDER


@handle_errors
def index(
    data: Annotated[Path, typer.Argument(help="BEIR folder (with corpus.jsonl) or a corpus .jsonl file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Index directory to write.")],
    embedder: Annotated[str, typer.Option(help="Embedder spec, e.g. st:bundled:all-MiniLM-L6-v2 or openai:MODEL@URL.")] = DEFAULT_EMBEDDER,
    index_type: Annotated[str, typer.Option("--index-type", help="flat (exact), hnsw or ivf.")] = "flat",
    param: Annotated[Optional[list[str]], typer.Option("--param", help="Index parameter key=value, e.g. m=32, nlist=256, nprobe=16.")] = None,
    query_prompt: Annotated[Optional[str], typer.Option(help="Prefix for queries (e.g. 'query: ').")] = None,
    document_prompt: Annotated[Optional[str], typer.Option(help="Prefix for documents (e.g. 'passage: ').")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory (default $TTTEMBED_CACHE_DIR or ~/.cache/tttembed).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing index directory.")] = False,
) -> None:
    """Embed a corpus and write a FAISS index with its manifest."""
    quiet_libraries()
    from tttembed import api
    from tttembed.data.beir import load_corpus

    params = parse_params(param)
    corpus = load_corpus(data / "corpus.jsonl" if data.is_dir() else data)
    emb = api.load_embedder(embedder, cache_dir=cache_dir, query_prompt=query_prompt,
                            document_prompt=document_prompt)
    with progress_bar("embedding corpus", total=len(corpus)) as advance:
        path = api.index_corpus(corpus, out, embedder=emb, index_type=index_type,
                                index_params=params, overwrite=overwrite, source=str(data),
                                progress=advance)
    console.print(f"indexed {len(corpus):,} documents with {emb.identity} "
                  f"(dim {emb.dim}, {index_type}) -> {path}  "
                  f"(model calls: {emb.model_calls}, texts embedded: {emb.texts_embedded:,})")
