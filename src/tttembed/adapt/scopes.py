"""Sharing scopes: which group owns each rewarded query, its weight, and alpha.

A group owns one vector ``v_g``. Scopes (METHOD.md Part 1, "The learned state"):

- ``"global"``: one group, key ``"*"``; weights average within each task first, then
  tasks uniformly: ``w_q = 1 / (n_tasks * n_task(q))``;
- ``"task"``: one group per task, key = the task name; ``w_q = 1 / n_g``;
- ``"query"``: one group per query text, key ``"<task>/#<digest>"`` (:func:`query_key`:
  the digest of the normalised text, :func:`query_digest`); ``w_q = 1``;
- ``"adapter"``: the task groups, each with a low-rank query-side map besides its vector
  (:mod:`tttembed.adapt.adapter`); ``"neighbour"``: the query groups, whose vectors also
  serve unseen queries close to them (:mod:`tttembed.adapt.neighbour`). :func:`sharing`
  names the groups each learns.

Query-wise keys name a query by its *text*, never by its id: ids are file-local (two
query files both have a ``q01``) and live traffic carries texts, so a query-wise state
applies to a query only when the text matches, whatever file or request it comes from.
Two rewarded rows of one task with the same text are one group (weights ``1/n_g``).
Keys are qualified by their task, so task names must not contain ``"/"`` (a key splits
on its first ``"/"``).

``n_g`` is the number of distinct rewarded queries of a group (one row of the reward
table per query: a repeated ``(task, qid)`` is an error) and
``alpha_g = n_g / (n_g + 1)``. Weights sum to 1 inside every group.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.types import SCOPES

#: Key of the single global group.
GLOBAL_KEY = "*"
#: Precedence when several states cover one query: the most specific first.
PRECEDENCE: tuple[str, ...] = ("query", "task", "global")
#: The scope of a state file: one sharing scope, or ``"mixed"`` (``--method auto``: task
#: keys and query keys in one file; a query's own key wins over its task's).
MIXED = "mixed"
#: Scopes that learn more than additive vectors, with the sharing scope of their groups.
EXTRA_SCOPES: dict[str, str] = {"adapter": "task", "neighbour": "query"}
#: Every scope ``learn --scope`` takes.
LEARN_SCOPES: tuple[str, ...] = (*SCOPES, *EXTRA_SCOPES)
STATE_SCOPES: tuple[str, ...] = (*LEARN_SCOPES, MIXED)


class Groups(NamedTuple):
    """``index`` (N,) int64 group of each row; ``keys`` one per group; ``weights`` (N,);
    ``texts`` (G,) distinct query texts per group, when known (a text rewarded under two
    ids is one query: live traffic carries texts, not ids)."""

    index: np.ndarray  # type: ignore[assignment]
    keys: list[str]
    weights: np.ndarray
    texts: np.ndarray | None = None

    @property
    def counts(self) -> np.ndarray:
        """``n_g``: rewarded queries per group (distinct texts where known), int64 (G,)."""
        if self.texts is not None:
            return np.asarray(self.texts, dtype=np.int64)
        return np.bincount(self.index, minlength=len(self.keys)).astype(np.int64)

    def order(self) -> np.ndarray:
        """Row order that sorts the rows by group (stable). Building the reward table in
        this order spares the optimizer a sorted copy of the candidate tensor."""
        return np.argsort(self.index, kind="stable")


def check_scope(scope: str) -> str:
    if scope not in LEARN_SCOPES:
        raise ConfigError(f"unknown scope {scope!r}; choose one of: {', '.join(LEARN_SCOPES)}")
    return scope


def sharing(scope: str) -> str:
    """The sharing scope whose groups ``scope`` learns (``adapter``: task, ``neighbour``:
    query; the others themselves)."""
    return EXTRA_SCOPES.get(check_scope(scope), scope)


def check_state_scope(scope: str) -> str:
    """A state file's scope: a sharing scope or ``"mixed"``."""
    if scope not in STATE_SCOPES:
        raise ConfigError(f"unknown state scope {scope!r}; choose one of: "
                          f"{', '.join(STATE_SCOPES)}")
    return scope


def key_scopes(scope: str) -> tuple[str, ...]:
    """The sharing scopes whose keys a state of ``scope`` looks up, in precedence order
    (a mixed state: a query's own key, then its task's)."""
    return ("query", "task") if scope == MIXED else (sharing(scope),)


def precedence(scope: str) -> int:
    """Where a state of ``scope`` stands when several cover one query (0 = most specific;
    a mixed state stands with the query-wise ones)."""
    return PRECEDENCE.index(key_scopes(scope)[0])


#: A query-wise key: ``<task>/#<16 hex digits>``.
QUERY_KEY = re.compile(r"[^/]+/#[0-9a-f]{16}")


def query_digest(text: str) -> str:
    """A digest of the normalised query text (NFC, whitespace collapsed): what identifies
    a query across files, where ids are file-local (16 hex digits)."""
    norm = " ".join(unicodedata.normalize("NFC", text).split())
    return hashlib.sha256(norm.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def query_key(task: str, text: str) -> str:
    """The query-wise group key of the query ``text`` in ``task``: ``task/#digest``."""
    return f"{task}/#{query_digest(text)}"


def group_key(scope: str, task: str, text: str) -> str:
    """The key of the group that the query ``text`` of ``task`` belongs to under ``scope``."""
    scope = sharing(scope)
    if scope == "global":
        return GLOBAL_KEY
    if scope == "task":
        return task
    return query_key(task, text)


def query_keys(scope: str, texts: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """Group key of every query (rewarded or not), from its text and task: what
    :func:`apply_state` looks up. The one lookup of search, serving, MTEB and the
    framework adapters. One pass over the batch (:func:`group_key` of each query): the
    scope resolved once, task and global keys without per-query work, query keys from
    :func:`query_digests`."""
    _check_inputs(texts, tasks)
    scope = sharing(scope)
    if scope == "global":
        return [GLOBAL_KEY] * len(texts)
    if scope == "task":
        return list(tasks)
    return [f"{t}/#{d}" for t, d in zip(tasks, query_digests(texts))]


def query_digests(texts: Sequence[str]) -> list[str]:
    """:func:`query_digest` of every text, in one pass (an ASCII text is already NFC)."""
    nfc, sha = unicodedata.normalize, hashlib.sha256
    return [sha(" ".join((t if t.isascii() else nfc("NFC", t)).split())
                .encode("utf-8", "surrogatepass")).hexdigest()[:16] for t in texts]


def make_groups(scope: str, qids: Sequence[str], tasks: Sequence[str],
                texts: Sequence[str] | None = None) -> Groups:
    """Groups and weights for the rewarded queries ``qids`` (row order kept).

    ``tasks[i]`` is the task of ``qids[i]``, ``texts[i]`` its text (needed by the query
    scope, whose groups are texts). Groups are numbered in order of first appearance, so
    the result is deterministic for a given row order.
    """
    scope = sharing(scope)
    _check_inputs(qids, tasks)
    if scope == "query" and (texts is None or len(texts) != len(qids)):
        raise ConfigError("query-wise groups are keyed by query text: give one text per "
                          "rewarded query (texts=...)")
    n = len(qids)
    seen: set[tuple[str, str]] = set()
    for i, (q, t) in enumerate(zip(qids, tasks)):
        if (t, q) in seen:
            raise DataError(
                f"query {q!r} of task {t!r} appears twice in the reward table (row {i})",
                fix="merge the rewards of one query into one row",
            )
        seen.add((t, q))
    task_ids, task_index = _first_appearance(list(tasks))
    task_sizes = np.bincount(task_index, minlength=len(task_ids)).astype(np.float64)
    if scope == "global":
        index = np.zeros(n, dtype=np.int64)
        keys = [GLOBAL_KEY] if n else []
        weights = 1.0 / (len(task_ids) * task_sizes[task_index]) if n else np.zeros(0)
    elif scope == "task":
        index, keys = task_index, task_ids
        weights = 1.0 / task_sizes[task_index]
    else:
        keys, index = _first_appearance([query_key(t, x) for x, t in zip(texts or (), tasks)])
        weights = 1.0 / np.bincount(index, minlength=len(keys)).astype(np.float64)[index]
    distinct = None
    if texts is not None and len(texts) == n:
        pairs = {(int(g), query_key(t, x)) for g, x, t in zip(index, texts, tasks)}
        distinct = np.bincount(np.array([g for g, _ in pairs], dtype=np.int64),
                               minlength=len(keys)).astype(np.int64)
    return Groups(index.astype(np.int64), keys, np.asarray(weights, dtype=np.float64),
                  distinct)


def alpha_from_counts(n: np.ndarray | Sequence[int] | int) -> np.ndarray:
    """Evidence-adaptive magnitude ``alpha_g = n_g / (n_g + 1)`` (0 for an empty group)."""
    n = np.asarray(n, dtype=np.float64)
    if np.any(n < 0):
        raise ValueError("counts must be >= 0")
    return n / (n + 1.0)


def _first_appearance(values: list[str]) -> tuple[list[str], np.ndarray]:
    order: dict[str, int] = {}
    index = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        index[i] = order.setdefault(v, len(order))
    return list(order), index


def _check_inputs(qids: Sequence[str], tasks: Sequence[str]) -> None:
    if isinstance(qids, str) or isinstance(tasks, str):
        raise TypeError("qids and tasks must be sequences of strings, not one string")
    if len(qids) != len(tasks):
        raise DataError(f"{len(qids)} query ids but {len(tasks)} task names; give one task per query")
    for t in set(tasks):
        if not isinstance(t, str) or not t or "/" in t:
            raise DataError(
                f"bad task name {t!r}",
                fix="task names are non-empty strings without '/'",
            )
