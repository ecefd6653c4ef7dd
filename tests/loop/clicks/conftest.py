"""A tiny synthetic task the click tests share: queries with 30 graded docs each and
rankers that are fixed random orders of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from tttembed.loop.clicks import simulate as sim


class Tiny:
    def __init__(self, queries: int = 150, docs: int = 30, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.docs = docs
        self.queries = {f"q{i}": f"query {i}" for i in range(queries)}
        self.qrels = {q: {f"{q}-d{j}": float(rng.integers(0, 3)) for j in range(docs)}
                      for q in self.queries}

    def ranker(self, seed: int) -> Callable[[str], Sequence[str]]:
        rng = np.random.default_rng(seed)
        orders = {q: [f"{q}-d{j}" for j in rng.permutation(self.docs)[:10]]
                  for q in self.queries}
        return orders.__getitem__

    def by_grade(self, q: str) -> list[str]:
        """The ideal ranking (ties by id)."""
        return sorted(self.qrels[q], key=lambda d: (-self.qrels[q][d], d))[:10]

    def traffic(self, rankers: dict[str, Callable[[str], Sequence[str]]],
                explore: float = 0.0) -> sim.ClickTraffic:
        return sim.ClickTraffic(self.queries, self.qrels, rankers, explore=explore)


@pytest.fixture(scope="session")
def tiny() -> Tiny:
    return Tiny()
