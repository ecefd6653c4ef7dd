"""Evaluation tasks: BEIR folders (names under a data root, or paths) and MTEB names.

One task = one corpus, the evaluated queries of a split and their judgments, and, when
asked and present, a second split whose judged queries may be used to *learn* (SciFact's
``train``): learning from them and evaluating the test queries is a leak-free transfer.

Every task gets its own index (its own corpus), cached under
``<cache>/eval/indexes/<task>-<corpus fingerprint[:12]>`` and reused when its manifest
matches the embedder and the corpus; document vectors come from the embedding cache.

MTEB tasks (``mteb:NAME``) need the optional ``mteb`` package and the network; offline
they are a clear error (nothing is downloaded by tests).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError, DataError, MissingDependency
from tttembed.core.progress import Advance
from tttembed.data.beir import Task
from tttembed.embed.base import Embedder
from tttembed.index.store import IndexHandle

MTEB_PREFIX = "mteb:"


def task_name(spec: str) -> str:
    """A short name for a task spec (folder name, or the MTEB name)."""
    if spec.startswith(MTEB_PREFIX):
        return spec[len(MTEB_PREFIX):]
    return Path(spec).name or spec


def load_eval_task(spec: str, *, data_root: str | Path | None = None, split: str = "test",
                   train_split: str | None = None) -> Task:
    """A BEIR folder path, a folder name under ``data_root``, or ``mteb:NAME``."""
    from tttembed.data.beir import load_qrels, load_task, resolve_task_path

    if spec.startswith(MTEB_PREFIX):
        return load_mteb_task(spec[len(MTEB_PREFIX):], split=split)
    path = resolve_task_path(spec, data_root)
    task = load_task(path, split=split, name=task_name(spec))
    if not task.qrels:
        raise DataError(f"task {task.name!r} has no judgments for split {split!r}", path=path,
                        fix="evaluation needs qrels/<split>.tsv")
    if "/" in task.name:
        raise ConfigError(f"task name {task.name!r} must not contain '/'")
    train_q: dict[str, str] = {}
    train_r: dict[str, dict[str, int]] = {}
    used_train = None
    if train_split and (path / "qrels" / f"{train_split}.tsv").is_file():
        from tttembed.data.beir import load_beir_queries

        all_q = load_beir_queries(path / "queries.jsonl")
        train_r = load_qrels(path / "qrels" / f"{train_split}.tsv", corpus_ids=task.corpus,
                             query_ids=all_q)
        train_q = {q: t for q, t in all_q.items() if q in train_r and q not in task.qrels}
        used_train = train_split
    judged = {q for q, g in task.qrels.items() if any(v >= 1 for v in g.values())}
    queries = {q: t for q, t in task.queries.items() if q in judged}
    return replace(task, queries=queries, train_queries=train_q, train_qrels=train_r,
                   train_split=used_train)


def load_eval_tasks(specs: Sequence[str], *, data_root: str | Path | None = None,
                    split: str = "test", train_split: str | None = None) -> list[Task]:
    if not specs:
        raise ConfigError("give at least one task (a BEIR folder name or path)")
    tasks = [load_eval_task(s, data_root=data_root, split=split, train_split=train_split)
             for s in specs]
    names = [t.name for t in tasks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"task names repeat: {', '.join(sorted(dup))}; give each task once")
    return tasks


def _online(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    import socket

    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def load_mteb_task(name: str, *, split: str = "test",
                   online: Callable[[], bool] = _online) -> Task:
    """An MTEB retrieval task through the optional ``mteb`` package (network needed)."""
    try:
        import mteb  # noqa: F401
    except ImportError:
        raise MissingDependency("mteb", "mteb") from None
    if not online():
        raise DataError(f"MTEB task {name!r} needs the network (the mteb package downloads it) "
                        "and this machine is offline",
                        fix="use a local BEIR folder instead (a name under the data root, "
                            "or a path)")
    task: Any = mteb.get_task(name)
    task.load_data()
    corpus = _mteb_split(task.corpus, split)
    queries = _mteb_split(task.queries, split)
    qrels = _mteb_split(task.relevant_docs, split)
    corpus = {str(k): {"title": str(v.get("title", "")), "text": str(v.get("text", ""))}
              if isinstance(v, Mapping) else {"title": "", "text": str(v)}
              for k, v in corpus.items()}
    qrels = {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    queries = {str(q): str(t) for q, t in queries.items() if str(q) in qrels}
    return Task(name.replace("/", "_"), None, corpus, queries, qrels, split,
                source=f"mteb:{name}")


def _mteb_split(data: Any, split: str) -> Mapping[str, Any]:
    if isinstance(data, Mapping) and split in data:
        data = data[split]
    if isinstance(data, Mapping) and len(data) == 1 and "default" in data:
        data = data["default"]
    if not isinstance(data, Mapping):
        raise DataError(f"unexpected MTEB data layout for split {split!r}")
    return data


def index_dir(task: Task, identity: str,
              cache_root: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/eval/indexes/<task>-<corpus fingerprint[:12]>-<embedder hash[:8]>``."""
    from tttembed.core.io import text_hash
    from tttembed.core.paths import cache_dir

    name = f"{task.name}-{task.fingerprint[:12]}-{text_hash(identity)[:8]}"
    return cache_dir(cache_root) / "eval" / "indexes" / name


def task_index(task: Task, embedder: Embedder,
               cache_root: str | os.PathLike[str] | None = None,
               progress: Advance | None = None) -> IndexHandle:
    """The task's cached index for ``embedder`` (built once; rebuilt on a manifest mismatch)."""
    from tttembed.index.store import open_or_build

    return open_or_build(task.corpus, index_dir(task, embedder.identity, cache_root), embedder,
                         progress=progress, rebuild=True, source=task.source)
