"""Click interventions, one owner: how a served list was changed on purpose, drawn from its
search id, and the one string format the search log stores (``serve`` writes it, the click
store reads it back).

RandPair exploration (Joachims et al., WSDM 2017), the light randomisation behind
``tttembed serve --explore P``: on a fraction P of searches one adjacent pair of the served
top-k, ranks (r, r+1) with r uniform in 1..min(k, :data:`EXPLORE_RANKS`) - 1, is swapped
before the list is returned, and the search is logged with the list as shown and the
intervention ``randpair:r``. Whether a search is explored, and which pair, is a pure
function of its search id (SHA-256), so a log can be re-derived, a simulator can replay it
and a test can predict it. Each explored search costs its user one adjacent swap in the
top 10.

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
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

T = TypeVar("T")

#: Swaps stay within the top ranks where position bias is estimated (1..10).
EXPLORE_RANKS = 10
#: The intervention kind a RandPair search is logged with (``randpair:R``).
RANDPAIR: Final = "randpair"
#: The intervention kind of an interleaved search (``interleave:VERSION:TEAMS``).
INTERLEAVE: Final = "interleave"
INTERLEAVE_SALT = b"interleave\x1f"


@dataclass(frozen=True)
class Intervention:
    """How one served list was changed: ``randpair`` (ranks ``rank`` and ``rank + 1``,
    1-based, swapped) or ``interleave`` (a team-draft interleaving with ``candidate``,
    ``teams`` one letter per rank: "A" the served version, "B" the candidate).
    ``str()`` is the form the search log stores; :meth:`parse` reads it back."""

    kind: Literal["randpair", "interleave"]
    rank: int = 0
    candidate: str = ""
    teams: str = ""

    @classmethod
    def randpair(cls, rank: int) -> Intervention:
        return cls(RANDPAIR, rank=int(rank))

    @classmethod
    def interleave(cls, candidate: str, teams: str) -> Intervention:
        return cls(INTERLEAVE, candidate=candidate, teams=teams)

    def __str__(self) -> str:
        if self.kind == RANDPAIR:
            return f"{RANDPAIR}:{self.rank}"
        return f"{INTERLEAVE}:{self.candidate}:{self.teams}"

    @classmethod
    def parse(cls, text: str) -> Intervention | None:
        """The intervention a stored string names, None for "" or any other form."""
        parts = text.split(":")
        if len(parts) == 3 and parts[0] == INTERLEAVE:
            return cls.interleave(parts[1], parts[2])
        if len(parts) == 2 and parts[0] == RANDPAIR and parts[1].isdigit():
            return cls.randpair(int(parts[1]))
        return None


def draw(search_id: str, salt: bytes) -> tuple[float, int]:
    """A uniform draw in [0, 1) and a 64-bit integer, both from the search id's digest
    (``salt`` keeps the RandPair and interleaving draws independent)."""
    digest = hashlib.sha256(salt + search_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64, int.from_bytes(digest[8:16], "big")


def randpair(search_id: str, n: int, fraction: float) -> int | None:
    """The 1-based rank r whose result swaps with r + 1 in search ``search_id`` of ``n``
    results, or None when this search is not explored (``fraction`` of searches are)."""
    if fraction <= 0 or n < 2:
        return None
    chance, pick = draw(search_id, b"")
    if chance >= fraction:
        return None
    return 1 + pick % (min(n, EXPLORE_RANKS) - 1)


def interleave_drawn(search_id: str, fraction: float) -> bool:
    """Whether search ``search_id`` is interleaved (``fraction`` of searches are)."""
    return fraction > 0 and draw(search_id, INTERLEAVE_SALT)[0] < fraction


def interleave_seed(search_id: str) -> int:
    """The seed of search ``search_id``'s team draft."""
    return draw(search_id, INTERLEAVE_SALT)[1]


def swapped(items: Sequence[T], rank: int) -> list[T]:
    """``items`` with the entries at 1-based ranks ``rank`` and ``rank + 1`` swapped."""
    out = list(items)
    out[rank - 1], out[rank] = out[rank], out[rank - 1]
    return out


__all__ = ["EXPLORE_RANKS", "INTERLEAVE", "INTERLEAVE_SALT", "RANDPAIR", "Intervention", "draw",
           "interleave_drawn", "interleave_seed", "randpair", "swapped"]
