"""Does a candidate beat the version served now? The promotion check of the closed loop.

Every rewarded query (task, text) is re-searched over the whole index twice: with the
served states applied and with the candidate's. Where the two top-k lists differ, their
never-judged documents are paid (through the ledger, at most ``cap`` pairs: whole queries
in a seeded random order until the cap, :func:`tttembed.ttt.judged.whole_queries`; the
rest are left out and counted), so both lists are fully judged and
``Delta_q = nDCG@k(candidate) - nDCG@k(served)`` is exact under the judge
(:func:`tttembed.ttt.judged.exact_gain`). Queries whose lists are equal count 0. The
candidate is promoted only when the 95% bootstrap interval of the mean Delta (tasks
weighted equally) lies above 0.

This check is in-sample: a query-wise vector serves exactly the texts it was learned on,
so for them it is the quantity that matters; the candidate's task-wise parts were kept
only with out-of-fold evidence against raw (:mod:`tttembed.ttt.select`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt.apply import apply_states, lookup_keys
from tttembed.adapt.state import AdaptState
from tttembed.index.base import Index
from tttembed.ttt.judged import Judged, K, Pay, exact_gain, never_judged, top_lists, whole_queries
from tttembed.ttt.queries import QuerySet


@dataclass(frozen=True)
class PromotionCheck:
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


def check_promotion(index: Index, queries: QuerySet, x: np.ndarray, judged: Judged,
                    served: Sequence[AdaptState], candidate: Sequence[AdaptState], pay: Pay,
                    *, cap: int, seed: int = 0) -> PromotionCheck:
    """The module docstring's check of the rewarded ``queries`` (base vectors ``x``);
    ``judged[key]`` the rewards a query already has, ``pay`` pays ``(query key, doc)``."""
    keys, texts, tasks = queries.keys, queries.texts, queries.tasks
    old = top_lists(index, adapted(x, texts, tasks, served))
    new = top_lists(index, adapted(x, texts, tasks, candidate))
    rng = np.random.default_rng(seed)
    changed = [q for q in range(len(keys)) if old[q] != new[q]]
    need = never_judged([keys[q] for q in changed],
                        [{"served": old[q], "candidate": new[q]} for q in changed], judged)
    kept = whole_queries([keys[q] for q in changed], need, cap, rng)
    pairs = [(q, d) for q in kept for d in sorted(need.get(q, []))]
    bought = pay(pairs) if pairs else {}
    keep, moved = set(kept), set(changed)
    rows = [q for q in range(len(keys)) if q not in moved or keys[q] in keep]
    left_out = len(changed) - len(kept)
    if not kept:
        return PromotionCheck(0.0, 0.0, 0.0, 1.0, len(rows), 0, 0, left_out)
    marks = [{**judged.get(keys[q], {}), **bought.get(keys[q], {})} for q in rows]
    g, p = exact_gain([old[q] for q in rows], [new[q] for q in rows], marks,
                      [tasks[q] for q in rows], rng)
    return PromotionCheck(g.gain, g.ci_low, g.ci_high, p, len(rows), len(kept), len(pairs),
                          left_out)


__all__ = ["PromotionCheck", "adapted", "check_promotion", "top_lists"]
