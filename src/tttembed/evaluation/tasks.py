"""Evaluation tasks: BEIR folders (names under a data root, or paths) and MTEB names.

One task = one corpus, the evaluated queries of a split and their judgments, and, when
asked and present, a second split whose judged queries may be used to *learn* (SciFact's
``train``): learning from them and evaluating the test queries is a leak-free transfer.

Every task gets its own index (its own corpus), cached under
``<cache>/eval/indexes/<task>-<corpus fingerprint[:12]>`` and reused when its manifest
matches the embedder and the corpus; document vectors come from the embedding cache.

MTEB tasks (``mteb:NAME``) need the optional ``mteb`` package. Their data is read from
the local Hugging Face hub cache (the dataset repo and revision MTEB's task metadata
names); offline and not cached, the error names the repo and the download command
(``hf download --repo-type dataset mteb/scifact``). To score adapted vectors
with MTEB's own evaluator instead, see :mod:`tttembed.integrations.mteb`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError, DataError, MissingDependency
from tttembed.core.progress import Advance
from tttembed.data.beir import Task, identical_ids_rule
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.types import PathLike

MTEB_PREFIX = "mteb:"


def task_name(spec: str) -> str:
    """A short name for a task spec (folder name, or the MTEB name)."""
    if spec.startswith(MTEB_PREFIX):
        return spec[len(MTEB_PREFIX):]
    return Path(spec).name or spec


def load_eval_task(spec: str, *, data_root: str | Path | None = None, split: str = "test",
                   train_split: str | None = None) -> Task:
    """A BEIR folder path, a folder name under ``data_root``, or ``mteb:NAME``."""
    from tttembed.data.beir import resolve_task_path

    if spec.startswith(MTEB_PREFIX):
        return load_mteb_task(spec[len(MTEB_PREFIX):], split=split, train_split=train_split)
    return _folder_task(resolve_task_path(spec, data_root), task_name(spec), split, train_split)


def _folder_task(path: Path, name: str, split: str, train_split: str | None) -> Task:
    """A BEIR folder's evaluated split (judged queries only) and, when asked and present,
    its learning split (judged queries not in the evaluated split)."""
    from tttembed.data.beir import load_qrels, load_task

    task = load_task(path, split=split, name=name)
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
    if any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
           for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    import socket

    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, read from the environment at call time
    (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_dataset(repo: str, revision: str | None = None) -> Path | None:
    """The local snapshot folder of dataset ``repo`` in the hub cache: the ``revision``
    when cached, else the cached ``main``; None when the dataset is not cached."""
    root = hub_cache() / f"datasets--{repo.replace('/', '--')}"
    snapshots = root / "snapshots"
    if revision and (snapshots / revision).is_dir():
        return snapshots / revision
    ref = root / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        if commit and (snapshots / commit).is_dir():
            return snapshots / commit
    return None


def download_hint(repo: str, revision: str | None = None) -> str:
    """The command that puts dataset ``repo`` into the local hub cache (huggingface_hub's
    ``hf`` CLI; its older versions name it ``huggingface-cli download``)."""
    rev = f" --revision {revision}" if revision else ""
    return f"hf download --repo-type dataset {repo}{rev}"


def load_mteb_task(name: str, *, split: str = "test", train_split: str | None = None,
                   online: Callable[[], bool] = _online) -> Task:
    """An MTEB retrieval task read from the local Hugging Face hub cache: the dataset repo
    and revision MTEB's metadata names (the cached ``main`` when that revision is absent).
    Offline and not cached: a DataError naming the repo and the command to download it;
    online and not cached: the dataset is downloaded into the cache first.

    A snapshot in BEIR layout (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) is read by
    our BEIR reader (with ``train_split`` when present); any other layout (MTEB 2's parquet
    configs ``corpus`` / ``queries`` / ``default`` or ``qrels``) by MTEB's own
    ``RetrievalDatasetLoader`` on the local folder, which never touches the network.
    """
    mteb = _import_mteb()
    meta = _mteb_retrieval_task(mteb, name).metadata
    repo = str(meta.dataset["path"])
    revision = meta.dataset.get("revision") or None
    folder = cached_dataset(repo, revision)
    if folder is None:
        if not online():
            raise DataError(
                f"MTEB task {name!r} reads the Hugging Face dataset {repo!r}, which is not in "
                f"the local cache ({hub_cache()}), and this machine is offline",
                fix=f"download it once on a connected machine with `{download_hint(repo, revision)}`"
                    ", or point HF_HOME / HF_HUB_CACHE at a cache that holds it")
        folder = _download_dataset(repo, revision)
    short = name.replace("/", "_")
    if _is_beir_folder(folder, split):
        task = _folder_task(folder, short, split, train_split)
        return replace(task, source=f"{MTEB_PREFIX}{name}")
    return _loader_task(folder, short, split, source=f"{MTEB_PREFIX}{name}")


def _import_mteb() -> Any:
    try:
        import mteb
    except ImportError:
        raise MissingDependency("mteb", "mteb") from None
    return mteb


def _mteb_retrieval_task(mteb: Any, name: str) -> Any:
    try:
        task = mteb.get_task(name)
    except KeyError:
        raise ConfigError(f"unknown MTEB task {name!r}; names as in mteb.get_tasks(), "
                          "e.g. mteb:SciFact") from None
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    if not isinstance(task, AbsTaskRetrieval):
        raise ConfigError(f"MTEB task {name!r} is a {task.metadata.type} task; "
                          "tttembed eval needs a retrieval task")
    if task.metadata.is_multilingual:
        raise ConfigError(f"MTEB task {name!r} has several subsets "
                          f"({', '.join(task.hf_subsets[:5])}); only single-subset "
                          "retrieval tasks are supported")
    return task


def _download_dataset(repo: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=repo, repo_type="dataset", revision=revision,
                                  cache_dir=hub_cache()))


def _is_beir_folder(folder: Path, split: str) -> bool:
    return all((folder / p).is_file()
               for p in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"))


def _check_split(folder: Path, split: str) -> None:
    """MTEB's loader falls back to a dataset's only split whatever the split asked; refuse
    a split the judgments do not have instead of evaluating another one."""
    from datasets import get_dataset_config_names, get_dataset_split_names

    try:
        configs = get_dataset_config_names(str(folder))
        config = "default" if "default" in configs else "qrels"
        splits = [str(s) for s in get_dataset_split_names(str(folder), config_name=config)]
    except Exception as exc:  # noqa: BLE001 - datasets raises many types; report the cause
        raise DataError(f"cannot read the MTEB dataset's configs: {type(exc).__name__}: "
                        f"{exc}", path=folder,
                        fix="check that the download is complete") from exc
    if split not in splits:
        raise DataError(f"no judgments for split {split!r} (available splits: "
                        f"{', '.join(splits) or 'none'})", path=folder,
                        fix="choose one of the available splits with --split")


def _loader_task(folder: Path, name: str, split: str, *, source: str) -> Task:
    """A task from a local dataset folder through MTEB's ``RetrievalDatasetLoader``."""
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader

    _check_split(folder, split)
    try:
        loader = RetrievalDatasetLoader(hf_repo=str(folder), revision=None,  # type: ignore[arg-type]
                                        split=split)
        data: Any = loader.load()
    except Exception as exc:  # noqa: BLE001 - datasets raises many types; report the cause
        raise DataError(f"cannot read MTEB dataset split {split!r}: "
                        f"{type(exc).__name__}: {exc}", path=folder,
                        fix="check the split name (--split) and that the download is "
                            "complete") from exc
    cols = data["corpus"].to_dict()
    titles = cols.get("title") or [""] * len(cols["id"])
    corpus = {str(i): {"title": str(t or ""), "text": str(x or "")}
              for i, t, x in zip(cols["id"], titles, cols["text"])}
    qrels = {str(q): {str(d): int(g) for d, g in docs.items()}
             for q, docs in data["relevant_docs"].items()}
    judged = {q for q, g in qrels.items() if any(v >= 1 for v in g.values())}
    qcols = data["queries"].to_dict()
    queries = {str(q): str(t) for q, t in zip(qcols["id"], qcols["text"]) if str(q) in judged}
    if not queries:
        raise DataError(f"MTEB dataset split {split!r} has no judged query", path=folder)
    return Task(name, folder, corpus, queries, qrels, split, source=source,
                ignore_identical_ids=identical_ids_rule(None, name)[0])


def index_dir(task: Task, identity: str,
              cache_root: PathLike | None = None) -> Path:
    """``<cache>/eval/indexes/<task>-<corpus fingerprint[:12]>-<embedder hash[:8]>``."""
    from tttembed.core.io import text_hash
    from tttembed.core.paths import cache_dir

    name = f"{task.name}-{task.fingerprint[:12]}-{text_hash(identity)[:8]}"
    return cache_dir(cache_root) / "eval" / "indexes" / name


def task_index(task: Task, embedder: Embedder,
               cache_root: PathLike | None = None,
               progress: Advance | None = None) -> Index:
    """The task's cached index for ``embedder`` (built once; rebuilt on a manifest mismatch)."""
    from tttembed.index.store import open_or_build

    return open_or_build(task.corpus, index_dir(task, embedder.identity, cache_root), embedder,
                         progress=progress, rebuild=True, source=task.source)
