"""The Scorer role.

``score(query, docs)`` returns float64 ``(len(docs),)`` rewards on [0, 1] (larger = more
relevant); ``nan`` marks a pair the scorer could not score (recorded as missing, never
a silent 0). Queries and documents are ``Item(id, text)`` records: text-based scorers
read ``text``; the ``qrels:`` scorer reads ``id``.

``mapping`` names how raw scores were put on [0, 1] (e.g. ``"p_yes"``, ``"grade/4"``,
``"bm25/query_max"``); it is recorded in state files.

``identity`` is the string that names everything that changes the rewards: the spec plus
any option that does (a Qwen3 instruction, a cross-encoder mapping, a BEIR split, a BM25
corpus fingerprint, an LLM judge's endpoint and rubric hash), never a secret such as an API
key. Two scorers with the same identity give the same reward to the same pair; the reward
ledger keys paid pairs on it. Every built-in scorer has it (third-party scorers without
one are keyed on ``spec``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np


class Item(NamedTuple):
    id: str
    text: str


@runtime_checkable
class Scorer(Protocol):
    spec: str
    identity: str
    mapping: str

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        """Rewards for (query, doc) pairs, float64 (len(docs),), in [0, 1] or nan."""
        ...


def get_scorer(spec: str, **options: Any) -> Scorer:
    from tttembed.registry import create

    return create("scorer", spec, **options)
