"""One shown document of one served search, with whether it was clicked: the unit every
click estimate reads (the store builds these from the search log and the events)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    """Document ``doc_id`` shown at 1-based ``rank`` for ``query`` (of ``task``) in search
    ``search_id``, served by ranker ``ranker`` (the registry version, "raw", or an
    interleaving's team: "A"/"B"); ``clicked`` whether the session clicked it; ``explored``
    whether the list was randomised (RandPair swap) or interleaved, so its ranks are an
    intervention; ``dwell_ms`` the longest dwell reported (0 when none); ``test`` the
    candidate version an interleaved search tested ("" otherwise; ``ranker`` is then the
    team, "A" served or "B" candidate, that contributed the document)."""

    search_id: str
    task: str
    query: str
    doc_id: str
    rank: int
    clicked: bool
    ranker: str = ""
    session: str = ""
    explored: bool = False
    dwell_ms: float = 0.0
    created: float = 0.0
    test: str = ""
