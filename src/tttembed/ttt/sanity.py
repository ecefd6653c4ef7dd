"""A label-free sanity check of a judge before anything is learned from it.

The base retriever is imperfect but not adversarial: over many queries, the documents it
ranks first are on average at least as relevant as those it ranks last. A judge whose
rewards *fall* with the base ranking's rank (it prefers the bottom of the lists) is far
more likely inverted (a reward mapping the wrong way round, a prompt that asks the
opposite, swapped columns) than right; the guard cannot see this, as it measures gains
with the same judge.

Per query with at least two different rewards on its base list: Spearman's rank
correlation between the reward and the list position (first = highest), in [-1, 1].
Paired over queries (:func:`tttembed.metrics.stats.compare` against 0: mean, 95%
bootstrap interval, two-sided randomisation p), the judge is refused when the interval
lies below 0 (``trust=True``, the CLI's ``--trust-judge``, overrides). With fewer than
:data:`MIN_QUERIES` such queries nothing is decided (said so).

Its power, printed in its line: the queries and pairs used, and the mean it could refuse
at that size. It is blind to a wrong judge that agrees with the base ranking: an inverted
qrels judge on a base ranking that puts the relevant documents last passes at +1. Only an
audit against people (``--audit qrels:PATH``) sees that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tttembed.core.errors import DataError
from tttembed.core.notes import note

#: Fewest queries with two different rewards on their base list before the check decides.
MIN_QUERIES = 5


@dataclass(frozen=True)
class RankCheck:
    """The check's result: queries used, mean rank correlation, its 95% interval, p."""

    queries: int
    mean: float
    ci_low: float
    ci_high: float
    p_value: float
    refused: bool
    trusted: bool = False
    #: Rewarded pairs on the queries used (the check's size, printed beside its verdict).
    pairs: int = 0

    def line(self) -> str:
        """The verdict in the sign's own words, with the check's power: its size, the
        mean it can refuse at that size, and what no label-free check can see."""
        blind = ("it cannot see a wrong judge that agrees with the base ranking (an "
                 "inverted one on a weak base ranking passes): --audit qrels:PATH compares "
                 "the judge with people")
        if self.queries < MIN_QUERIES:
            return (f"too few queries with two different rewards to check the judge against "
                    f"the base ranking ({self.queries} < {MIN_QUERIES}): not checked; "
                    + blind)
        size = f"over {self.queries} queries ({self.pairs} pairs)"
        head = (f"reward vs base rank, mean Spearman {self.mean:+.3f} "
                f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}] {size} (p {self.p_value:.3f})")
        if self.refused:
            verdict = ("rewards are higher near the bottom of the base lists: it prefers the "
                       "bottom of the lists")
            if self.trusted:
                verdict += "; learning anyway (--trust-judge)"
            return f"{head}: {verdict}"
        verdict = ("rewards are higher near the top of the base lists (they agree with the "
                   "base ranking)" if self.ci_low > 0 else
                   "no trend along the base lists (rewards neither higher at the top nor at "
                   "the bottom)")
        power = max(self.ci_high - self.mean, 0.0)
        return (f"{head}: {verdict}; a label-free check that refuses a mean below about "
                f"{-power:+.3f} at this size (a judge preferring the bottom of the lists); "
                + blind)

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of ``values``, ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), float)
    ranks[order] = np.arange(len(values), dtype=float)
    for v in np.unique(values):
        tied = values == v
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def rank_agreement(rewards: Mapping[str, Mapping[str, float]],
                   lists: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Per query with two different finite rewards on its list: Spearman's correlation
    between the reward and the list position, first highest (+1: rewards fall down the
    list as the base ranks them; -1: they rise)."""
    out: dict[str, float] = {}
    for key, given in rewards.items():
        ranked = [(i, given[d]) for i, d in enumerate(lists.get(key, ()))
                  if d in given and np.isfinite(given[d])]
        values = np.array([r for _, r in ranked], float)
        if len(values) < 2 or len(np.unique(values)) < 2:
            continue
        top = -np.array([i for i, _ in ranked], float)  # higher = nearer the top
        a, b = _ranks(values), _ranks(top)
        out[key] = float(np.corrcoef(a, b)[0, 1])
    return out


def check_judge(rewards: Mapping[str, Mapping[str, float]],
                lists: Mapping[str, Sequence[str]], *, spec: str = "the judge",
                trust: bool = False, n_resamples: int = 2000, seed: int = 0) -> RankCheck:
    """Run the check; its line is a note, ``judge check: ...`` (one plain line:
    :func:`tttembed.core.notes.note`). A judge that prefers the bottom of the lists is a
    :class:`DataError` unless ``trust``."""
    from tttembed.metrics.stats import compare

    per_query = rank_agreement(rewards, lists)
    if len(per_query) < MIN_QUERIES:
        check = RankCheck(len(per_query), float("nan"), float("nan"), float("nan"),
                          float("nan"), refused=False)
    else:
        c = compare(per_query, dict.fromkeys(per_query, 0.0), n_resamples=n_resamples,
                    seed=seed)
        pairs = sum(1 for k in per_query for d in lists.get(k, ())
                    if np.isfinite(rewards[k].get(d, np.nan)))
        check = RankCheck(c.n, c.delta, c.ci_low, c.ci_high, c.p_value,
                          refused=c.ci_high < 0, trusted=trust, pairs=pairs)
    if check.refused and not trust:
        raise DataError(f"judge check: scorer {spec}: {check.line()}; an inverted judge "
                        "(a reward mapping the wrong way round?) would teach the opposite of "
                        "what it should, so nothing was learned",
                        fix="check the judge with --audit qrels:PATH, or pass --trust-judge "
                            "if it is right to prefer what the base ranks last")
    note(f"judge check: {check.line()}")
    return check


__all__ = ["MIN_QUERIES", "RankCheck", "check_judge", "rank_agreement"]
