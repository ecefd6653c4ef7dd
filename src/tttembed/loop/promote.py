"""Does a candidate beat the version served now? The promotion check of the closed loop.

Every rewarded query (task, text) is re-searched over the whole index twice: with the
served states applied and with the candidate's. Where the two top-k lists differ, their
never-judged documents are paid (through the ledger, at most ``cap`` pairs: queries in a
seeded random order until the cap; the rest are left out and counted), so both lists are
fully judged and ``Delta_q = nDCG@k(candidate) - nDCG@k(served)`` is exact under the judge
(:func:`tttembed.adapt.validate.judged_deltas`). Queries whose lists are equal count 0.
The candidate is promoted only when the 95% bootstrap interval of the mean Delta (tasks
weighted equally) lies above 0.

This comparison is in-sample: a query-wise vector serves exactly the texts it was learned
on, so for them it is the quantity that matters; the candidate's task-wise parts were
kept only with out-of-fold evidence against raw (:mod:`tttembed.ttt.select`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt.apply import apply_states, lookup_keys
from tttembed.adapt.crossval import N_BOOT
from tttembed.adapt.state import AdaptState
from tttembed.adapt.validate import alpha_gains, judged_deltas
from tttembed.index.base import Index

K = 10


@dataclass(frozen=True)
class Comparison:
    """The candidate against the served version on the rewarded queries."""

    gain: float
    ci_low: float
    ci_high: float
    p: float
    queries: int
    changed: int
    validation_pairs: int
    left_out: int = 0

    @property
    def better(self) -> bool:
        return self.changed > 0 and self.ci_low > 0

    def as_dict(self) -> dict[str, Any]:
        return {"gain": self.gain, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p": self.p, "queries": self.queries, "changed": self.changed,
                "validation_pairs": self.validation_pairs, "left_out": self.left_out,
                "against": "served version", "k": K}


def adapted(x: np.ndarray, texts: Sequence[str], tasks: Sequence[str],
            states: Sequence[AdaptState]) -> np.ndarray:
    """``x`` with ``states`` applied (the lookup serve and search use)."""
    if not states:
        return np.asarray(x, dtype=np.float32)
    return apply_states(x, lookup_keys(states, texts, tasks), states)


def top_lists(index: Index, vectors: np.ndarray, k: int = K) -> list[list[str]]:
    _, rows = index.search(np.asarray(vectors, dtype=np.float32), min(k, len(index)))
    ids = index.doc_ids
    return [[ids[r] for r in row if r >= 0] for row in rows]


#: pays [(query position, doc id)] -> {position: {doc: reward}}
PayFor = Callable[[list[tuple[int, str]]], Mapping[int, Mapping[str, float]]]


def compare(index: Index, x: np.ndarray, texts: Sequence[str], tasks: Sequence[str],
            judged: Sequence[Mapping[str, float]], served: Sequence[AdaptState],
            candidate: Sequence[AdaptState], pay: PayFor, *, cap: int, seed: int = 0
            ) -> Comparison:
    """The module docstring's check; ``judged[q]`` the rewards query ``q`` already has."""
    old = top_lists(index, adapted(x, texts, tasks, served))
    new = top_lists(index, adapted(x, texts, tasks, candidate))
    rng = np.random.default_rng(seed)
    changed = [q for q in range(len(texts)) if old[q] != new[q]]
    need = {q: sorted({*old[q], *new[q]} - set(judged[q])) for q in changed}
    kept, spent, order = [], 0, [changed[i] for i in rng.permutation(len(changed))]
    for q in order:
        if spent + len(need[q]) > cap:
            continue
        kept.append(q)
        spent += len(need[q])
    bought = pay([(q, d) for q in kept for d in need[q]]) if spent else {}
    keep = set(kept)
    rows = [q for q in range(len(texts)) if q not in changed or q in keep]
    deltas = np.zeros(len(rows))
    for i, q in enumerate(rows):
        if q in keep:
            marks = {**judged[q], **bought.get(q, {})}
            deltas[i] = judged_deltas(old[q], [new[q]], marks, K)[1][0]
    return _summary(deltas, [tasks[q] for q in rows], changed=len(kept), spent=spent,
                    left_out=len(changed) - len(kept), rng=rng)



def _summary(deltas: np.ndarray, tasks: Sequence[str], *, changed: int, spent: int,
             left_out: int, rng: np.random.Generator) -> Comparison:
    if len(deltas) < 2 or not changed:
        mean = float(deltas.mean()) if len(deltas) else 0.0
        return Comparison(mean, 0.0, 0.0, 1.0, len(deltas), changed, spent, left_out)
    (g,), p = alpha_gains(["candidate"], deltas[:, None], np.asarray(tasks), n_boot=N_BOOT,
                          rng=rng)
    return Comparison(g.gain, g.ci_low, g.ci_high, float(p[0]), len(deltas), changed, spent,
                      left_out)


__all__ = ["Comparison", "K", "PayFor", "adapted", "compare", "top_lists"]
