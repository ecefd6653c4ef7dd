"""Interleaving as the online promotion test (METHOD.md Part 4; ``--interleave P``).

A version the offline check did not refuse becomes the *candidate* (the loop's
coordination, :mod:`tttembed.loop.coordination`) instead of being promoted; the servers interleave it
with the served version on a fraction P of searches, and every interleaved (search,
session) read by the click feed is an outcome (+1 candidate's team clicked more, -1 the
served team's, 0 a tie). A sequential test (the mixture SPRT, an always-valid p at
alpha 0.05) stops as soon as it can: "B better" promotes the candidate (``by:
interleaving``, with n, wins, losses and p as the reason), "A better or equal" drops it.
A candidate whose served version changed meanwhile (a person promoted or rolled back) is
dropped too: its test was against another list. The test's state is rebuilt from the
outcomes the feed holds, so a restarted learner resumes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.clicks.sequential import DECISIONS, SequentialTest
from tttembed.loop.coordination import Coordination, open_coordination
from tttembed.loop.coordination.base import checked_candidate
from tttembed.registry.base import StateRegistry

#: Outcomes after which an undecided test gives up (the candidate is dropped).
MAX_OUTCOMES = 20_000


@dataclass(frozen=True)
class OnlineVerdict:
    """Where the candidate's test stands: ``decision`` one of
    :data:`~tttembed.loop.clicks.sequential.DECISIONS` (or "stale": its served version
    changed), with the counts and the always-valid p of "candidate better"."""

    candidate: str
    decision: str
    searches: int
    wins: int
    losses: int
    p: float

    def reason(self) -> str:
        return (f"interleaving: {self.decision} after {self.searches} searches "
                f"({self.wins} wins, {self.losses} losses, always-valid p {self.p:.4f})")

    def as_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "decision": self.decision,
                "searches": self.searches, "wins": self.wins, "losses": self.losses,
                "p": self.p}


class OnlineTest:
    """Runs the candidate's test on ``registry`` from ``feed``'s outcomes (the candidate
    named in ``coordination``, by default the registry's own)."""

    def __init__(self, registry: StateRegistry, feed: ClickFeed,
                 coordination: Coordination | None = None, *,
                 max_outcomes: int = MAX_OUTCOMES) -> None:
        self.registry, self.feed, self.max_outcomes = registry, feed, max_outcomes
        self.coordination = coordination or open_coordination(registry)
        self.last: OnlineVerdict | None = None
        #: why the last candidate was dropped unread ("" when none was)
        self.dropped = ""

    def propose(self, version: str) -> None:
        """Make ``version`` the candidate tested against the version served now."""
        self.coordination.set_candidate(version, self.registry.served())

    def candidate(self) -> str | None:
        record = self.coordination.candidate()
        return None if record is None else str(record["version"])

    def step(self) -> OnlineVerdict | None:
        """Update the test of the candidate (None: there is none); promote or drop it
        when it decides."""
        record, why = checked_candidate(self.coordination,
                                        {v.name for v in self.registry.versions()})
        if record is None:
            if why and self.coordination.candidate_checked()[0] is not None:
                self.coordination.clear_candidate()  # names no version: nothing to test
                self.dropped = why
            return None
        name = str(record["version"])
        test = SequentialTest(max_n=self.max_outcomes)
        for outcome in self.feed.outcomes(name):
            if test.update(outcome) != DECISIONS[2]:
                break
        decision = test.decision
        if record.get("against") != self.registry.served():
            decision = "stale"
        verdict = OnlineVerdict(name, decision, test.searches, test.wins, test.losses,
                                test.p_value)
        if decision == DECISIONS[0]:
            self.registry.promote(name, by="interleaving", reason=verdict.reason())
            self.coordination.clear_candidate()
        elif decision != DECISIONS[2]:
            self.coordination.clear_candidate()
        self.last = verdict
        return verdict


__all__ = ["MAX_OUTCOMES", "OnlineTest", "OnlineVerdict"]
