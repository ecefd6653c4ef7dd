"""Does a candidate beat the version served now? The promotion check of the closed loop.

Every rewarded query (task, text) is re-searched over the whole index twice: with the
served states applied and with the candidate's. Where the two top-k lists differ, their
never-judged documents are paid (through the ledger, at most ``cap`` pairs: whole queries
in a seeded random order until the cap, :func:`tttembed.ttt.judged.whole_queries`; the
rest are left out and counted), so both lists are fully judged and
``Delta_q = nDCG@k(candidate) - nDCG@k(served)`` is exact under the judge
(:func:`tttembed.ttt.judged.exact_gain`). Queries whose lists are equal count 0. The
candidate is promoted only when ONE paired test (:func:`tttembed.ttt.judged.paired_test`:
a bootstrap of the task-balanced mean Delta) over at least ``min_queries`` queries says
better at alpha 0.05, and the interval and p shown are that test's (:func:`verdict`, a
small function over the typed evidence record :class:`PromotionCheck`, so that a second
test can be added beside it). Fewer than 2 queries have no interval. When the cap leaves
the test short of ``min_queries``, the check pays on (``reach`` pairs: the learner's
validation share of the judge budget and the budget left) for more of the changed
queries, whole, until it has them; what it still lacks is :func:`waiting`'s to say.

This check is in-sample: a query-wise vector serves exactly the texts it was learned on,
so for them it is the quantity that matters; the candidate's task-wise parts were kept
only with out-of-fold evidence against raw (:mod:`tttembed.ttt.select`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.adapt.apply import apply_states, lookup_keys
from tttembed.adapt.state import AdaptState
from tttembed.index.base import Index
from tttembed.ttt.judged import (
    ALPHA,
    Judged,
    K,
    Pay,
    exact_deltas,
    never_judged,
    paired_test,
    top_lists,
    whole_queries,
)
from tttembed.ttt.queries import QuerySet

#: Queries the promotion test needs at least, unless ``--min-queries`` says otherwise.
MIN_QUERIES = 20
#: What decided (shown beside the figures).
TEST = "paired bootstrap of the mean Delta (tasks weighted equally)"


@dataclass(frozen=True)
class PromotionCheck:
    """The candidate against the served version on the rewarded queries: the one paired
    test's mean ``gain``, interval (None with fewer than 2 queries) and ``p`` over
    ``queries`` rows, of which ``changed`` had a different top-k."""

    gain: float
    ci_low: float | None
    ci_high: float | None
    p: float
    queries: int
    changed: int
    validation_pairs: int
    left_out: int = 0
    min_queries: int = MIN_QUERIES

    @property
    def enough(self) -> bool:
        """Enough queries for the test to decide (``min_queries``, and 2 for an interval)."""
        return self.queries >= max(self.min_queries, 2) and self.ci_low is not None

    @property
    def better(self) -> bool:
        """The paired test says better at alpha 0.05 over enough queries."""
        return (self.changed > 0 and self.enough and self.ci_low is not None
                and self.ci_low > 0 and self.p < ALPHA)

    def as_dict(self) -> dict[str, Any]:
        return {"gain": self.gain, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p": self.p, "queries": self.queries, "n": self.queries,
                "changed": self.changed, "validation_pairs": self.validation_pairs,
                "left_out": self.left_out, "min_queries": self.min_queries,
                "alpha": ALPHA, "test": TEST, "against": "served version", "k": K}

    def shown(self) -> str:
        """The figures that decided, as one phrase."""
        n = f"{self.queries} quer{'y' if self.queries == 1 else 'ies'}"
        if self.ci_low is None or self.ci_high is None:
            return (f"Delta nDCG@10 {self.gain:+.4f} on {n} (no interval with fewer than "
                    "2 queries)")
        return (f"Delta nDCG@10 {self.gain:+.4f} [{self.ci_low:+.4f}, {self.ci_high:+.4f}] "
                f"p {self.p:.3f} on {n} against the served version")


def verdict(check: PromotionCheck, *, frozen: bool, candidate: Sequence[AdaptState]
            ) -> tuple[bool, str]:
    """Promote or not, and why (the figures of the one test that decided)."""
    if not candidate:
        return False, "refused: the guard kept raw everywhere (no part helps)"
    if not check.changed and check.left_out:
        return False, (f"refused: the validation budget judged none of the {check.left_out} "
                       "queries whose top-10 changes")
    if not check.changed:
        return False, "refused: no query's top-10 changes against the served version"
    shown = check.shown()
    if check.ci_low is None:
        return False, f"refused: {shown}"
    if check.queries < check.min_queries:
        return False, (f"refused: {shown}: fewer than --min-queries {check.min_queries} "
                       "queries decide nothing")
    if not check.better:
        return False, f"refused: {shown}: the paired test does not say better at alpha {ALPHA}"
    if frozen:
        return False, f"refused: promotions are frozen ({shown})"
    return True, f"promoted: {shown}"


def reach_min_queries(keys: Sequence[str], need: Mapping[str, Sequence[str]], reach: int,
                      short: int, rng: np.random.Generator) -> list[str]:
    """Up to ``short`` more of the changed queries ``keys`` (the cap left them out), in a
    seeded random order, each whole while what they need fits in ``reach`` pairs."""
    out: list[str] = []
    spent = 0
    for i in rng.permutation(len(keys)):
        n = len(need.get(keys[i], ()))
        if len(out) >= short:
            break
        if spent + n <= reach:
            out.append(keys[i])
            spent += n
    return out


def waiting(check: PromotionCheck, *, rewarded: int, candidate: Sequence[AdaptState],
            pairs_left: int) -> dict[str, Any]:
    """What the test lacks to decide (empty when it has its ``min_queries``): the judged
    queries needed, whether the traffic lacks them (``rewarded`` queries in all) or the
    budget, and the pairs left, with one sentence saying so."""
    if not candidate or not check.changed or check.queries >= check.min_queries:
        return {}
    needed = check.min_queries - check.queries
    why = "traffic" if rewarded < check.min_queries else "validation budget"
    return {"queries": check.queries, "min_queries": check.min_queries, "needed": needed,
            "short_of": why, "pairs_left": pairs_left,
            "message": f"{needed} more judged queries needed; {pairs_left:,} pairs left"}


def adapted(x: np.ndarray, texts: Sequence[str], tasks: Sequence[str],
            states: Sequence[AdaptState]) -> np.ndarray:
    """``x`` with ``states`` applied (the lookup serve and search use)."""
    if not states:
        return np.asarray(x, dtype=np.float32)
    return apply_states(x, lookup_keys(states, texts, tasks), states)


def check_promotion(index: Index, queries: QuerySet, x: np.ndarray, judged: Judged,
                    served: Sequence[AdaptState], candidate: Sequence[AdaptState], pay: Pay,
                    *, cap: int, seed: int = 0, min_queries: int = MIN_QUERIES,
                    reach: int = 0) -> PromotionCheck:
    """The module docstring's check of the rewarded ``queries`` (base vectors ``x``);
    ``judged[key]`` the rewards a query already has, ``pay`` pays ``(query key, doc)``;
    ``reach``: pairs it may pay beyond ``cap``, only to bring the test up to
    ``min_queries`` queries (:func:`reach_min_queries`)."""
    texts, tasks = queries.texts, queries.tasks
    return check_lists(index, queries, adapted(x, texts, tasks, served),
                       adapted(x, texts, tasks, candidate), judged, pay, cap=cap, seed=seed,
                       min_queries=min_queries, reach=reach)


def check_lists(index: Index, queries: QuerySet, old_x: np.ndarray, new_x: np.ndarray,
                judged: Judged, pay: Pay, *, cap: int, seed: int = 0,
                min_queries: int = MIN_QUERIES, reach: int = 0) -> PromotionCheck:
    """:func:`check_promotion` on given query vectors: the served ones ``old_x`` against
    the candidate's ``new_x``, one row per query of ``queries``."""
    keys, tasks = queries.keys, queries.tasks
    old, new = top_lists(index, old_x), top_lists(index, new_x)
    rng = np.random.default_rng(seed)
    changed = [q for q in range(len(keys)) if old[q] != new[q]]
    need = never_judged([keys[q] for q in changed],
                        [{"served": old[q], "candidate": new[q]} for q in changed], judged)
    kept = whole_queries([keys[q] for q in changed], need, cap, rng)
    short = min_queries - (len(keys) - len(changed) + len(kept))
    if short > 0 and reach > 0:
        kept += reach_min_queries([keys[q] for q in changed if keys[q] not in set(kept)],
                                  need, reach, short, rng)
    pairs = [(q, d) for q in kept for d in sorted(need.get(q, []))]
    bought = pay(pairs) if pairs else {}
    keep, moved = set(kept), set(changed)
    rows = [q for q in range(len(keys)) if q not in moved or keys[q] in keep]
    left_out = len(changed) - len(kept)
    if not kept:
        return PromotionCheck(0.0, None, None, 1.0, len(rows), 0, 0, left_out, min_queries)
    marks = [{**judged.get(keys[q], {}), **bought.get(keys[q], {})} for q in rows]
    deltas = exact_deltas([old[q] for q in rows], [new[q] for q in rows], marks)
    t = paired_test(deltas, [tasks[q] for q in rows], rng)
    return PromotionCheck(t.gain, t.ci_low, t.ci_high, t.p, t.n, len(kept), len(pairs),
                          left_out, min_queries)


__all__ = ["MIN_QUERIES", "PromotionCheck", "adapted", "check_lists", "check_promotion",
           "reach_min_queries", "top_lists", "verdict", "waiting"]
