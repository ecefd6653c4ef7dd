"""Embedders: the Embedder protocol, backends chosen by spec, and the embedding cache."""

from __future__ import annotations

from tttembed.embed.base import DEFAULT_EMBEDDER, Embedder, Kind, get_embedder, l2_normalize

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "Kind", "get_embedder", "l2_normalize"]
