"""Sharing scopes: which group owns each rewarded query, its weight, and alpha.

A group owns one vector ``v_g``. Scopes (METHOD.md Part 1, "The learned state"):

- ``"global"``: one group, key ``"*"``; weights average within each task first, then
  tasks uniformly: ``w_q = 1 / (n_tasks * n_task(q))``;
- ``"task"``: one group per task, key = the task name; ``w_q = 1 / n_g``;
- ``"query"``: one group per query, key ``"<task>/<qid>"``; ``w_q = 1``.

Query keys are always qualified by their task so that the same query id in two tasks
(``"0"``, ``"q1"``...) never collides. Task names therefore must not contain ``"/"``
(a key splits on its first ``"/"``); query ids may.

``n_g`` is the number of distinct rewarded queries of a group (one row of the reward
table per query: a repeated ``(task, qid)`` is an error) and
``alpha_g = n_g / (n_g + 1)``. Weights sum to 1 inside every group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.types import SCOPES

#: Key of the single global group.
GLOBAL_KEY = "*"
#: Precedence when several states cover one query: the most specific first.
PRECEDENCE: tuple[str, ...] = ("query", "task", "global")


class Groups(NamedTuple):
    """``index`` (N,) int64 group of each row; ``keys`` one per group; ``weights`` (N,)."""

    index: np.ndarray  # type: ignore[assignment]
    keys: list[str]
    weights: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """``n_g``: rewarded queries per group, int64 (G,)."""
        return np.bincount(self.index, minlength=len(self.keys)).astype(np.int64)

    def order(self) -> np.ndarray:
        """Row order that sorts the rows by group (stable). Building the reward table in
        this order spares the optimizer a sorted copy of the candidate tensor."""
        return np.argsort(self.index, kind="stable")


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ConfigError(f"unknown scope {scope!r}; choose one of: {', '.join(SCOPES)}")
    return scope


def query_key(task: str, qid: str) -> str:
    """The query-wise group key of ``qid`` in ``task``."""
    return f"{task}/{qid}"


def group_key(scope: str, task: str, qid: str) -> str:
    """The key of the group that a query of ``task`` belongs to under ``scope``."""
    check_scope(scope)
    if scope == "global":
        return GLOBAL_KEY
    if scope == "task":
        return task
    return query_key(task, qid)


def query_keys(scope: str, qids: Sequence[str], tasks: Sequence[str]) -> list[str]:
    """Group key of every query (rewarded or not): what :func:`apply_state` looks up."""
    _check_inputs(qids, tasks)
    return [group_key(scope, t, q) for q, t in zip(qids, tasks)]


def make_groups(scope: str, qids: Sequence[str], tasks: Sequence[str]) -> Groups:
    """Groups and weights for the rewarded queries ``qids`` (row order kept).

    ``tasks[i]`` is the task of ``qids[i]``. Groups are numbered in order of first
    appearance, so the result is deterministic for a given row order.
    """
    check_scope(scope)
    _check_inputs(qids, tasks)
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
        index = np.arange(n, dtype=np.int64)
        keys = [query_key(t, q) for q, t in zip(qids, tasks)]
        weights = np.ones(n, dtype=np.float64)
    return Groups(index.astype(np.int64), keys, np.asarray(weights, dtype=np.float64))


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
