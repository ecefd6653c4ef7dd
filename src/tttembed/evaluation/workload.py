"""What the evaluation protocols run on: a workload's tasks (:class:`TaskData`: index,
queries, judgments, base retrieval) and the prepared :class:`Workload`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tttembed.data.beir import Task
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.ttt import BaseRetrieval, QuerySet

#: Depth of every evaluated run (and of the base retrieval of each task).
EVAL_DEPTH = 100
#: One protocol cell: metric -> {"task/qid": value}.
PerQuery = dict[str, dict[str, float]]


@dataclass(frozen=True, eq=False)
class TaskData:
    """One task of a workload: its index, evaluated queries, judgments and base retrieval
    (top ``EVAL_DEPTH`` or more); optional learning-only queries (a train split)."""

    name: str
    index: Index
    corpus: Mapping[str, Mapping[str, str]] = field(repr=False)
    queries: QuerySet = field(repr=False)
    qrels: Mapping[str, Mapping[str, int]] = field(repr=False)
    base: BaseRetrieval = field(repr=False)
    train: QuerySet | None = field(default=None, repr=False)
    train_base: BaseRetrieval | None = field(default=None, repr=False)


@dataclass
class Workload:
    """The tasks, their prepared data and the embedder of one evaluation."""

    tasks: list[Task]
    data: list[TaskData]
    embedder: Embedder
    timings: dict[str, float] = field(default_factory=dict)
