"""``tttembed index``: embed a corpus and write an index (FAISS folder, Milvus, Qdrant)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import (
    console,
    handle_errors,
    parse_params,
    progress_group,
    quiet_libraries,
)
from tttembed.cli._options import (
    CacheOpt,
    ConcurrencyOpt,
    EmbedderOpt,
    ExecutorOpt,
    MaxRetriesOpt,
    OverwriteOpt,
    QuietOpt,
    RayAddressOpt,
    RpmOpt,
    TimeoutOpt,
    ray_executor,
)
from tttembed.embed.base import DEFAULT_EMBEDDER


@handle_errors
def index(
    data: Annotated[Path, typer.Argument(metavar="DATA", help="BEIR folder (with corpus.jsonl) or a corpus .jsonl file.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Index to write: a folder (FAISS), milvus:URI/COLLECTION (a Milvus Lite .db file or http://host:19530) or qdrant:URL_OR_PATH/COLLECTION.")],
    embedder: EmbedderOpt = DEFAULT_EMBEDDER,
    index_type: Annotated[str, typer.Option("--index-type", help="flat (exact), hnsw, ivf or ivfpq (FAISS folders only; collections are flat).")] = "flat",
    param: Annotated[Optional[list[str]], typer.Option("--param", help="Index parameter key=value, e.g. m=32, nlist=256, nprobe=16.")] = None,
    query_prompt: Annotated[Optional[str], typer.Option(help="Prefix for queries (e.g. 'query: ').")] = None,
    document_prompt: Annotated[Optional[str], typer.Option(help="Prefix for documents (e.g. 'passage: ').")] = None,
    cache_dir: CacheOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    concurrency: ConcurrencyOpt = None,
    rpm: RpmOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    store_text: Annotated[bool, typer.Option("--store-text", help="Also keep each document's text (title and text, as embedded) in a milvus:/qdrant: collection.")] = False,
) -> None:
    """Embed a corpus and write an index (FAISS folder, Milvus or Qdrant collection) with its manifest."""
    quiet_libraries()
    from tttembed import api

    params = parse_params(param)
    if out.exists() and not overwrite:
        raise api.ConfigError(f"index {out} already exists; pass --overwrite to replace it")
    emb = api.load_embedder(embedder, cache_dir=cache_dir, query_prompt=query_prompt,
                            document_prompt=document_prompt,
                            **api.HttpLimits(timeout, max_retries, concurrency,
                                             rpm).options(embedder))
    with progress_group(not quiet) as stage:
        handle = api.index_corpus(data, out, embedder=emb, index_type=index_type,
                                  index_params=params, overwrite=overwrite, progress=stage,
                                  executor=ray_executor(executor, ray_address),
                                  store_text=store_text)
    console.print(f"indexed {len(handle):,} documents with {emb.identity} "
                  f"(dim {handle.dim}, {index_type}) -> {out}  "
                  f"(model calls: {getattr(emb, 'model_calls', 0)}, texts embedded: "
                  f"{getattr(emb, 'texts_embedded', 0):,})")
