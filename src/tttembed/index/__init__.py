"""The index role: the Index Protocol (:mod:`.base`), FAISS folders (:mod:`.faiss_backend`)
and vector-database collections (:mod:`.collection`) behind one dispatch by spec
(:mod:`.store`), each with its manifest (:mod:`.manifest`)."""

from __future__ import annotations

from tttembed.index.base import Index
from tttembed.index.store import build_index, load_index

__all__ = ["Index", "build_index", "load_index"]
