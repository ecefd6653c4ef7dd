"""Direct reranking, the baseline every adapted state is compared with (pure).

Within one query, the rewarded candidates are stably sorted by reward (descending)
**inside their original slots**: the positions that held rewarded candidates keep holding
rewarded candidates, now ordered by reward; unrewarded slots keep their document. Missing
rewards (nan) count as unrewarded. Queries without rewards keep their base order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def rerank_slots(ranking: Sequence[str], rewards: Mapping[str, float]) -> list[str]:
    """One query: the base ranking with rewarded slots reordered by reward."""
    slots = [i for i, d in enumerate(ranking)
             if d in rewards and not math.isnan(float(rewards[d]))]
    # stable: equal rewards keep their base order
    order = sorted(slots, key=lambda i: -float(rewards[ranking[i]]))
    out = list(ranking)
    for slot, src in zip(slots, order):
        out[slot] = ranking[src]
    return out


def direct_rerank(run: Mapping[str, Mapping[str, float]],
                  rewards: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """A run with every rewarded query reranked in its slots.

    The new scores keep the base run's score values in slot order (slot i keeps the i-th
    best base score), so any metric reads the new order; ties in the base scores are
    broken by tiny decrements so that the order is unambiguous.
    """
    out: dict[str, dict[str, float]] = {}
    for qid, docs in run.items():
        # base order = how the metrics read a run: score descending, ties by doc id
        # descending (trec_eval's rule), so equal-score duplicates are ranked alike
        ranked = sorted(sorted(docs.items(), key=lambda kv: kv[0], reverse=True),
                        key=lambda kv: -kv[1])
        ids = [d for d, _ in ranked]
        if qid in rewards and rewards[qid]:
            ids = rerank_slots(ids, rewards[qid])
        scores = [s for _, s in ranked]
        new: dict[str, float] = {}
        prev = math.inf
        for did, s in zip(ids, scores):
            s = min(float(s), prev - 1e-9) if prev != math.inf else float(s)
            new[did] = s
            prev = s
        out[qid] = new
    return out
