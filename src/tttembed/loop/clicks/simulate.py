"""Simulated users for the click estimates (METHOD.md Part 4): query streams drawn Zipf-like,
clicks by the position-based model (examination 1/rank^eta, click given examined from the
qrels with noise) or by the cascade model, and two bots whose clicks ignore the document
(always rank 1; uniform over the ranks). Pure: ids, qrels and a seeded generator in,
:class:`~tttembed.loop.rows.Shown` records out; the tests use tiny synthetic qrels,
``benchmarks/bench_clicks.py`` a BEIR task's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.loop.clicks.intervention import randpair, swapped
from tttembed.loop.rows import Shown

#: a ranker: a query id to the ids it serves, best first
Ranker = Callable[[str], Sequence[str]]


def examination(k: int, eta: float) -> np.ndarray:
    """The position-based model's examination probabilities 1/r^eta at ranks 1..k."""
    return 1.0 / np.arange(1, k + 1, dtype=np.float64) ** eta


def attraction(grades: Sequence[float], noise: float, top: float) -> np.ndarray:
    """Click probability given examined: ``noise`` for a non-relevant document, rising
    linearly with the grade to ``1 - noise`` at grade ``top``."""
    g = np.clip(np.asarray(grades, dtype=np.float64) / max(top, 1e-12), 0.0, 1.0)
    return noise + (1.0 - 2.0 * noise) * g


class ClickModel(Protocol):
    """A user: which of the shown ``grades`` (one per rank, best first) are clicked."""

    def clicks(self, grades: Sequence[float], rng: np.random.Generator) -> np.ndarray: ...


@dataclass(frozen=True)
class PositionBased:
    """Examines rank r with probability 1/r^eta, clicks an examined document with
    :func:`attraction` of its grade (``top``: the task's highest grade)."""

    eta: float = 1.0
    noise: float = 0.1
    top: float = 1.0

    def clicks(self, grades: Sequence[float], rng: np.random.Generator) -> np.ndarray:
        theta = examination(len(grades), self.eta)
        gamma = attraction(grades, self.noise, self.top)
        return np.asarray(rng.random(len(grades)) < theta * gamma)


@dataclass(frozen=True)
class Cascade:
    """Scans from the top, clicks with :func:`attraction` of the grade and stops after a
    click with probability ``stop``."""

    noise: float = 0.1
    top: float = 1.0
    stop: float = 1.0

    def clicks(self, grades: Sequence[float], rng: np.random.Generator) -> np.ndarray:
        gamma = attraction(grades, self.noise, self.top)
        out = np.zeros(len(grades), dtype=bool)
        for r, p in enumerate(gamma):
            if rng.random() < p:
                out[r] = True
                if rng.random() < self.stop:
                    break
        return out


@dataclass(frozen=True)
class AlwaysFirst:
    """A bot that clicks rank 1 of every search."""

    def clicks(self, grades: Sequence[float], rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(len(grades), dtype=bool)
        out[:1] = True
        return out


@dataclass(frozen=True)
class UniformRandom:
    """A bot that clicks one rank drawn uniformly, whatever is shown there."""

    def clicks(self, grades: Sequence[float], rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(len(grades), dtype=bool)
        if len(grades):
            out[int(rng.integers(len(grades)))] = True
        return out


@dataclass(frozen=True)
class Population:
    """Who searches: ``users[i]`` with share ``weights[i]``, each kind spread over
    ``sessions`` session ids named ``{name}-{j}``."""

    users: Mapping[str, ClickModel]
    weights: Mapping[str, float]
    sessions: int = 50

    def draw(self, rng: np.random.Generator) -> tuple[str, ClickModel]:
        names = sorted(self.users)
        w = np.array([self.weights.get(n, 0.0) for n in names], dtype=np.float64)
        if w.sum() <= 0:
            raise ConfigError("a click population needs a positive weight "
                              "(give at least one user kind a weight > 0)")
        name = names[int(rng.choice(len(names), p=w / w.sum()))]
        return f"{name}-{int(rng.integers(self.sessions))}", self.users[name]


def zipf_queries(query_ids: Sequence[str], n: int, rng: np.random.Generator,
                 s: float = 1.0) -> list[str]:
    """``n`` query ids drawn Zipf-like (probability ∝ 1/rank^s over a random order of
    ``query_ids``): head queries recur, the tail is seen a few times."""
    if not query_ids:
        raise ConfigError("zipf_queries needs at least one query id")
    order = rng.permutation(len(query_ids))
    p = 1.0 / np.arange(1, len(query_ids) + 1, dtype=np.float64) ** s
    picks = rng.choice(len(query_ids), size=n, p=p / p.sum())
    return [query_ids[int(order[i])] for i in picks]


def grades_of(ids: Sequence[str], qrel: Mapping[str, float]) -> list[float]:
    """The qrels grade of each id (0 when unjudged)."""
    return [float(qrel.get(d, 0.0)) for d in ids]


@dataclass(frozen=True)
class ClickTraffic:
    """What :func:`simulate` replays: ``queries`` (id -> text) drawn Zipf-like with
    exponent ``zipf``, ``rankers`` (name -> ranker, one drawn uniformly per search),
    ``explore`` the fraction of searches with a RandPair swap (the server's own
    :func:`tttembed.loop.clicks.intervention.randpair` of the search id ``s{i}``), ``k``
    results shown."""

    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, float]]
    rankers: Mapping[str, Ranker]
    k: int = 10
    explore: float = 0.0
    zipf: float = 1.0
    task: str = "task"


def simulate(traffic: ClickTraffic, population: Population, n: int,
             rng: np.random.Generator) -> list[Shown]:
    """``n`` searches of ``traffic`` by ``population``: every shown document as one
    :class:`Shown` (``created`` the search's index, ``explored`` for RandPair lists)."""
    names = sorted(traffic.rankers)
    out: list[Shown] = []
    for i, qid in enumerate(zipf_queries(sorted(traffic.queries), n, rng, traffic.zipf)):
        ranker = names[int(rng.integers(len(names)))]
        ids = list(traffic.rankers[ranker](qid))[: traffic.k]
        sid = f"s{i}"
        swap = randpair(sid, len(ids), traffic.explore)
        explored = swap is not None
        if swap is not None:
            ids = swapped(ids, swap)
        session, user = population.draw(rng)
        clicked = user.clicks(grades_of(ids, traffic.qrels.get(qid, {})), rng)
        out.extend(Shown(search_id=sid, task=traffic.task, query=traffic.queries[qid],
                         doc_id=d, rank=r + 1, clicked=bool(clicked[r]), ranker=ranker,
                         session=session, explored=explored, created=float(i))
                   for r, d in enumerate(ids))
    return out
