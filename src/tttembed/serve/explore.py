"""The served list changed on purpose: RandPair (``serve --explore P``) swaps one adjacent
pair, interleaving (``serve --interleave P``) team-drafts the served list with the
candidate's. What is drawn, and the string each search is logged with, belong to the click
vocabulary (:mod:`tttembed.loop.clicks.intervention`); this module applies them to a
served result in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tttembed.loop.clicks.intervention import (
    Intervention,
    interleave_drawn,
    interleave_seed,
    randpair,
    swapped,
)


def apply_randpair(search_id: str, item: dict[str, Any], fraction: float) -> str:
    """RandPair (``--explore``): swap one adjacent pair of ``item``'s ids and scores in
    place when ``search_id`` is drawn; the intervention to log ("" when not drawn)."""
    rank = randpair(search_id, len(item["ids"]), fraction)
    if rank is None:
        return ""
    item["ids"], item["scores"] = swapped(item["ids"], rank), swapped(item["scores"], rank)
    return str(Intervention.randpair(rank))


def interleave_item(search_id: str, item: dict[str, Any], other: dict[str, Any],
                    fraction: float, candidate: str) -> str:
    """Team-draft interleave ``item`` (the served list: ``ids``, ``scores``) with
    ``other`` (the candidate's) in place when ``search_id`` is drawn (``fraction`` of
    searches); the intervention to log ("" when not drawn)."""
    from tttembed.loop.clicks.interleave import team_draft

    if not candidate or not interleave_drawn(search_id, fraction):
        return ""
    rng = np.random.default_rng(interleave_seed(search_id))
    inter = team_draft(item["ids"], other["ids"], len(item["ids"]), rng)
    score = {**dict(zip(other["ids"], other["scores"])), **dict(zip(item["ids"], item["scores"]))}
    item["ids"], item["scores"] = list(inter.ids), [score[d] for d in inter.ids]
    return str(Intervention.interleave(candidate, "".join(inter.teams)))


__all__ = ["apply_randpair", "interleave_item"]
