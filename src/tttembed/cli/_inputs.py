"""Loading what commands need: query sources (one task each) and the corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError


def load_query_sources(sources: list[Path], split: str | None, task_names: list[str] | None = None
                       ) -> tuple[dict[str, dict[str, str]], dict[str, dict], Path | None]:
    """``{task: {qid: text}}``, ``{task: qrels}`` and the first BEIR folder (for its corpus).

    A BEIR folder gives its split's queries (task = folder name); a file gives all its
    queries (task = file stem, or ``--task``)."""
    from tttembed.data.beir import load_task
    from tttembed.data.queries import load_queries

    if task_names and len(task_names) != len(sources):
        raise ConfigError("give one --task name per --queries source")
    queries: dict[str, dict[str, str]] = {}
    qrels: dict[str, dict] = {}
    folder = None
    for i, src in enumerate(sources):
        if src.is_dir():
            task = load_task(src, split=split)
            name = task_names[i] if task_names else task.name
            queries[name] = dict(task.queries)
            if task.qrels:
                qrels[name] = task.qrels
            folder = folder or src
        else:
            name = task_names[i] if task_names else src.stem
            queries[name] = load_queries(src)
        if len(queries) != i + 1:
            raise ConfigError(f"two query sources are both named {name!r}; name them with --task")
    return queries, qrels, folder


def load_corpus_for(index: Any, corpus: Path | None, folder: Path | None
                    ) -> dict[str, dict[str, str]]:
    """The corpus the index was built from: --corpus, the BEIR folder, or the manifest's
    source; checked against the index's corpus fingerprint."""
    from tttembed.data.beir import load_corpus
    from tttembed.ttt.queries import check_corpus_matches

    candidates = [corpus, folder]
    src = index.manifest.get("corpus_source")
    if src and src not in ("<dict>",) and Path(src).exists():
        candidates.append(Path(src))
    path = next((p for p in candidates if p is not None), None)
    if path is None:
        raise ConfigError("scorers need the document texts: give --corpus (a BEIR folder or "
                          "corpus.jsonl)")
    docs = load_corpus(path / "corpus.jsonl" if path.is_dir() else path)
    check_corpus_matches(index, docs)
    return docs
