"""Data loading with strict validation: BEIR folders, plain query files, multi-hop chains.

Every problem in an input file is a DataError naming the file, the 1-based line and a fix.
"""

from __future__ import annotations

from tttembed.data.beir import (
    Task,
    corpus_fingerprint,
    doc_text,
    load_beir_queries,
    load_corpus,
    load_qrels,
    load_task,
    resolve_task_path,
)
from tttembed.data.chains import Chain, load_chains, load_multihop
from tttembed.data.queries import load_queries

__all__ = [
    "Chain",
    "Task",
    "corpus_fingerprint",
    "doc_text",
    "load_beir_queries",
    "load_chains",
    "load_corpus",
    "load_multihop",
    "load_qrels",
    "load_queries",
    "load_task",
    "resolve_task_path",
]
