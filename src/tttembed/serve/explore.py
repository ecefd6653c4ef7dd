"""RandPair exploration (Joachims et al., WSDM 2017), the light randomisation behind
``tttembed serve --explore P``: on a fraction P of searches one adjacent pair of the served
top-k, ranks (r, r+1) with r uniform in 1..min(k, :data:`EXPLORE_RANKS`) - 1, is swapped
before the list is returned, and the search is logged with the list as shown and the
intervention ``randpair:r``. Whether a search is explored, and which pair, is a pure
function of its search id (SHA-256), so a log can be re-derived and a test can predict it.
Each explored search costs its user one adjacent swap in the top 10.

Interleaving (``serve --interleave P``, while the registry names a candidate version): on a
fraction P of searches the list returned is a team-draft interleaving of the served
version's list (team A) and the candidate's (team B), logged as ``interleave:V:TEAMS``
(V the candidate, TEAMS one letter per rank); drawn, like RandPair, from the search id
(another digest, so the two draws are independent). Each interleaved search costs its
user up to half its list from a version not yet promoted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

#: Swaps stay within the top ranks where position bias is estimated (1..10).
EXPLORE_RANKS = 10
#: The intervention kind a RandPair search is logged with (``randpair:R``).
RANDPAIR = "randpair"
#: The intervention kind of an interleaved search (``interleave:VERSION:TEAMS``).
INTERLEAVE = "interleave"
INTERLEAVE_SALT = b"interleave\x1f"


def _draw(search_id: str, salt: bytes) -> tuple[float, int]:
    digest = hashlib.sha256(salt + search_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64, int.from_bytes(digest[8:16], "big")


def randpair(search_id: str, n: int, fraction: float) -> int | None:
    """The 1-based rank r whose result swaps with r + 1 in search ``search_id`` of ``n``
    results, or None when this search is not explored (``fraction`` of searches are)."""
    if fraction <= 0 or n < 2:
        return None
    draw, pick = _draw(search_id, b"")
    if draw >= fraction:
        return None
    return 1 + pick % (min(n, EXPLORE_RANKS) - 1)


def interleave_drawn(search_id: str, fraction: float) -> bool:
    """Whether search ``search_id`` is interleaved (``fraction`` of searches are)."""
    return fraction > 0 and _draw(search_id, INTERLEAVE_SALT)[0] < fraction


def interleave_item(search_id: str, item: dict[str, Any], other: dict[str, Any],
                    fraction: float, candidate: str) -> str:
    """Team-draft interleave ``item`` (the served list: ``ids``, ``scores``) with
    ``other`` (the candidate's) in place when ``search_id`` is drawn (``fraction`` of
    searches); the intervention to log ("" when not drawn)."""
    from tttembed.loop.clicks.interleave import team_draft

    if not candidate or not interleave_drawn(search_id, fraction):
        return ""
    _, seed = _draw(search_id, INTERLEAVE_SALT)
    k = len(item["ids"])
    inter = team_draft(item["ids"], other["ids"], k, np.random.default_rng(seed))
    score = {**dict(zip(other["ids"], other["scores"])), **dict(zip(item["ids"], item["scores"]))}
    item["ids"], item["scores"] = list(inter.ids), [score[d] for d in inter.ids]
    return f"{INTERLEAVE}:{candidate}:{''.join(inter.teams)}"


def swapped(items: Sequence[T], rank: int) -> list[T]:
    """``items`` with the entries at 1-based ranks ``rank`` and ``rank + 1`` swapped."""
    out = list(items)
    out[rank - 1], out[rank] = out[rank], out[rank - 1]
    return out


__all__ = ["EXPLORE_RANKS", "INTERLEAVE", "RANDPAIR", "interleave_drawn", "interleave_item", "randpair", "swapped"]
