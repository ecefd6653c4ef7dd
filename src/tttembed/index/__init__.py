"""The index role: FAISS inner product over L2-normalised vectors, with a manifest."""

from __future__ import annotations

from tttembed.index.store import IndexHandle, build_index, open_index

__all__ = ["IndexHandle", "build_index", "open_index"]
