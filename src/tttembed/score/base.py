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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Capabilities:
    """What a scorer needs and promises, declared on its factory (see :func:`declare`)
    so that callers never test the scheme.

    ``needs_corpus``: built with ``corpus=`` (the documents of the index it scores);
    ``uses_labels``: reads human judgments by query id (evaluated queries must never be
    rewarded by it: transfer protocols only; ``qrels=`` may give the judgments);
    ``cacheable``: its rewards depend on the texts only, so paid pairs go to the ledger.
    """

    needs_corpus: bool = False
    uses_labels: bool = False
    cacheable: bool = True


DEFAULT_CAPABILITIES = Capabilities()


def declare(capabilities: Capabilities) -> Callable[[F], F]:
    """Mark a scorer factory (function or class) with its capabilities."""
    def mark(factory: F) -> F:
        factory.capabilities = capabilities  # type: ignore[attr-defined]
        return factory
    return mark


def capabilities(spec: str) -> Capabilities:
    """The capabilities of the scorer ``spec`` builds (defaults for undeclared factories)."""
    from tttembed.core.backends import factory

    made = factory("scorer", spec)
    found = getattr(made, "capabilities", None)
    return found if isinstance(found, Capabilities) else DEFAULT_CAPABILITIES


def uses_labels(spec: str) -> bool:
    """Whether the scorer of ``spec`` (or of a recorded identity ``scheme:...``) reads human
    judgments; False for a scheme this process does not know."""
    try:
        return capabilities(spec).uses_labels
    except Exception:  # noqa: BLE001  (an unknown or unloadable scheme: not a label scorer)
        return False


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
    """Build a scorer from its spec string through the registry."""
    from tttembed.core.backends import create

    return create("scorer", spec, **options)
