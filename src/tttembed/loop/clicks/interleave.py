"""Team-draft interleaving (Radlinski et al., CIKM 2008) of the served list A and the
candidate B, and its click credit (Chapelle et al., TOIS 2012): per search +1 when B's
team got more clicks, −1 when A's did, 0 on a tie (no clicks included)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.core.errors import ConfigError

#: the two teams, in the order outcomes count them: A (served) and B (candidate)
TEAMS = ("A", "B")


@dataclass(frozen=True)
class Interleaving:
    """The interleaved ``ids`` (best first) and the team that contributed each."""

    ids: tuple[str, ...]
    teams: tuple[str, ...]

    def team_of(self, doc_id: str) -> str:
        """The team of a shown doc ("" when it was not shown)."""
        try:
            return self.teams[self.ids.index(doc_id)]
        except ValueError:
            return ""


def team_draft(a: Sequence[str], b: Sequence[str], k: int,
               rng: np.random.Generator) -> Interleaving:
    """Up to ``k`` ids: the team with fewer picks so far (a coin toss on a tie) adds its
    best id not yet shown; a team whose list is used up leaves the rest to the other."""
    if k < 1:
        raise ConfigError(f"interleaving needs k >= 1, got {k}")
    ids: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    picks = {"A": 0, "B": 0}
    lists = {"A": list(a), "B": list(b)}
    pos = {"A": 0, "B": 0}
    while len(ids) < k:
        left = {t: _next(lists[t], pos[t], seen) for t in TEAMS}
        live = [t for t in TEAMS if left[t] < len(lists[t])]
        if not live:
            break
        if len(live) == 2 and picks["A"] == picks["B"]:
            team = TEAMS[int(rng.integers(2))]
        elif len(live) == 2:
            team = "A" if picks["A"] < picks["B"] else "B"
        else:
            team = live[0]
        doc = lists[team][left[team]]
        pos[team] = left[team] + 1
        ids.append(doc)
        teams.append(team)
        seen.add(doc)
        picks[team] += 1
    return Interleaving(tuple(ids), tuple(teams))


def _next(ids: Sequence[str], start: int, seen: Collection[str]) -> int:
    """The index of the first id at or after ``start`` not in ``seen`` (len when none)."""
    i = start
    while i < len(ids) and ids[i] in seen:
        i += 1
    return i


def credit(inter: Interleaving, clicked: Collection[str]) -> int:
    """+1 when B's team has more of the ``clicked`` ids, −1 when A's has, else 0."""
    wins = {"A": 0, "B": 0}
    for doc, team in zip(inter.ids, inter.teams, strict=True):
        if doc in clicked:
            wins[team] += 1
    return int(np.sign(wins["B"] - wins["A"]))
