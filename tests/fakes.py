"""Tiny deterministic fakes, for plumbing tests only (real-model tests use `minilm`)."""

from __future__ import annotations

import hashlib

import numpy as np

from tttembed.embed.base import l2_normalize


class HashEmbedder:
    """Deterministic pseudo-embeddings from a text hash; counts calls and texts."""

    def __init__(self, dim: int = 16, spec: str = "fake:hash") -> None:
        self.spec = spec
        self.identity = spec
        self.dim = dim
        self.calls = 0
        self.texts: list[str] = []

    def encode(self, texts, kind="document"):
        self.calls += 1
        self.texts.extend(texts)
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(f"{kind}:{t}".encode()).digest()[:8], "little")
            rows.append(np.random.default_rng(seed).standard_normal(self.dim))
        return l2_normalize(np.array(rows, dtype=np.float32).reshape(len(texts), self.dim))


def tiny_corpus(n: int = 30) -> dict[str, dict[str, str]]:
    return {f"d{i}": {"title": f"title {i}", "text": f"document number {i} about topic {i % 5}"}
            for i in range(n)}
