"""The bounded learning window: what one learning cycle learns from, so that its time and
memory do not grow with the number of rewarded texts.

The rule (fixed before any run): a cycle learns from at most :data:`WINDOW` rewarded
texts, those whose rewards changed most recently (:class:`RecentTexts`: a text is
"changed" when its rewards differ from those the learner last saw for it; among texts
that changed in the same cycle, the one learned least recently first, so that texts
whose click rates move every cycle take turns). Method auto's query part and the asked
questions' promotion check run on the window alone. A text outside the window keeps the
query-wise vector the served version holds for it (:func:`keep_served`): it is served
exactly as before, so the check loses nothing by leaving it out. The shared part and the
new questions' check run on a larger set, bounded too (:mod:`tttembed.loop.shared_set`):
the window's texts and the others changed most recently, up to
:data:`~tttembed.loop.shared_set.SHARED_TEXTS`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

import numpy as np

from tttembed.adapt.scopes import query_key
from tttembed.adapt.state import AdaptState
from tttembed.core.errors import ConfigError

#: Rewarded texts one cycle learns from (the most recently changed).
WINDOW = 100
#: Texts whose last-seen rewards a learner remembers (the least recently changed dropped
#: first; a dropped text counts as changed when it comes back).
REMEMBERED = 20_000

#: a rewarded text's key: (task, text) in the learner, any sortable key elsewhere
K = TypeVar("K", str, tuple[str, str])


def _signature(rewards: Mapping[str, float]) -> str:
    text = "\n".join(f"{d}\t{float(r):.6g}" for d, r in sorted(rewards.items()))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class RecentTexts(Generic[K]):
    """The learner's memory of when each rewarded text's rewards last changed and when it
    was last learned (module docstring): :meth:`pick` is a cycle's window."""

    def __init__(self, window: int | None = None, remembered: int = REMEMBERED) -> None:
        window = WINDOW if window is None else window
        if window < 1 or remembered < window:
            raise ConfigError("the window must be >= 1 and remembered >= the window")
        self.window, self.remembered = window, remembered
        self._cycle = 0
        #: key -> (its rewards' signature, the cycle they last changed), oldest first
        self._seen: OrderedDict[K, tuple[str, int]] = OrderedDict()
        #: key -> the cycle it was last in a window
        self._learned: dict[K, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def pick(self, rewards: Mapping[K, Mapping[str, float]]) -> list[K]:
        """The keys of ``rewards`` a cycle learns from, sorted: all of them up to
        :attr:`window`, else the :attr:`window` whose rewards changed most recently, ties
        to the text learned least recently (never first), then to the key."""
        self._cycle += 1
        seen = self._seen
        for key in sorted(rewards):
            sig = _signature(rewards[key])
            if seen.get(key, ("", 0))[0] != sig:
                seen.pop(key, None)
                seen[key] = (sig, self._cycle)
        while len(seen) > self.remembered:
            self._learned.pop(seen.popitem(last=False)[0], None)
        if len(rewards) <= self.window:
            picked = sorted(rewards)
        else:
            picked = sorted(sorted(rewards, key=lambda k: (-seen.get(k, ("", 0))[1],
                                                           self._learned.get(k, 0), k)
                                   )[:self.window])
        for key in picked:
            self._learned[key] = self._cycle
        return picked

    def latest(self, rewards: Mapping[K, Mapping[str, float]], n: int,
               keep: Sequence[K] = ()) -> list[K]:
        """The keys of ``rewards`` whose rewards changed most recently (as of the last
        :meth:`pick`), at most ``n`` of them and every key of ``keep`` beside them, sorted
        (the shared set: :mod:`tttembed.loop.shared_set`)."""
        if len(rewards) <= n:
            return sorted(rewards)
        out = set(keep)
        for key in sorted(rewards, key=lambda k: (-self._seen.get(k, ("", 0))[1], k)):
            if len(out) >= n:
                break
            out.add(key)
        return sorted(out)


def keep_served(candidate: AdaptState | None, served: Sequence[AdaptState],
                outside: Sequence[tuple[str, str]]) -> AdaptState | None:
    """``candidate`` with the served version's query-wise vectors of the texts
    ``outside`` the window ((task, text) pairs) that it lacks; unchanged when nothing is
    served, when the candidate is not a mixed state, or the served version is not one
    mixed or query-wise state of the same dimension, or when the candidate holds low-rank maps or neighbour rows."""
    donor = served[0] if len(served) == 1 else None
    if candidate is None or donor is None or not outside or donor.dim != candidate.dim:
        return candidate
    if candidate.scope != "mixed" or donor.scope not in ("mixed", "query"):
        return candidate
    if any(len(s.parts.adapter_rows) or len(s.parts.neighbour_rows) for s in (candidate, donor)):
        return candidate
    have = set(candidate.keys)
    wanted = {query_key(t, q) for t, q in outside} - have
    theirs = [g for g, k in enumerate(donor.keys) if k in wanted]
    if not theirs:
        return candidate
    return replace(candidate, scope="mixed", query_ids=(),
                   keys=tuple(candidate.keys) + tuple(donor.keys[g] for g in theirs),
                   vectors=np.concatenate([candidate.vectors, donor.vectors[theirs]]),
                   alpha=np.concatenate([candidate.alpha, donor.alpha[theirs]]),
                   n_g=np.concatenate([candidate.n_g, donor.n_g[theirs]]))


__all__ = ["REMEMBERED", "WINDOW", "RecentTexts", "keep_served"]
