"""Rewards for the eval harness: one scorer per task (or one for all), built from a spec,
paid through the ledger on the configured executor, and counted (:class:`RewardSource`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tttembed.data.beir import Task
from tttembed.score.base import Scorer, capabilities
from tttembed.types import Rewards

if TYPE_CHECKING:  # pragma: no cover
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.workload import Workload

class RewardSource:
    """``rewards_for(pairs)`` over a workload for one scorer spec: one scorer per task
    (``bm25`` gets the task's corpus, ``qrels`` the task's judgments of every split),
    through the ledger; paid pairs counted."""

    def __init__(self, spec: str, work: Workload, cfg: EvalConfig) -> None:
        self.spec = spec
        self.work = work
        self.cfg = cfg
        self.caps = capabilities(spec)
        self._scorers: dict[str, Scorer] = {}
        self.requested = 0
        self.seconds = 0.0
        self.notes: list[str] = []

    def scorer(self, task: Task) -> Scorer:
        """One scorer per task when it depends on the task's corpus or judgments, else one."""
        from tttembed.ttt import build_scorer

        per_task = self.caps.needs_corpus or self.caps.uses_labels
        name = task.name if per_task else "*"
        if name not in self._scorers:
            if self.caps.uses_labels:  # every split's judgments of this task, by query id
                judged = {**task.train_qrels, **task.qrels}
                opts = self.spec.partition("?")[2]
                sc = build_scorer(f"{self.spec.split(':', 1)[0]}:{task.source}"
                                  + (f"?{opts}" if opts else ""), task.corpus, qrels=judged)
            else:
                cfg = self.cfg
                sc = build_scorer(self.spec, task.corpus, cache_dir=cfg.cache_dir,
                                  **cfg.limits.options(self.spec))
            self._executor(sc)
            self._scorers[name] = sc
        return self._scorers[name]

    def _executor(self, scorer: Scorer) -> None:
        """Pay this scorer's pairs on ``cfg.executor``; a fallback note is kept once."""
        from tttembed.execute.score import use_executor

        note = use_executor(scorer, self.cfg.executor)
        if note and note not in self.notes:
            self.notes.append(note)

    def identity(self) -> str:
        if self.caps.uses_labels:  # the judgments are in the task fingerprints
            return str(getattr(self.scorer(self.work.tasks[0]), "label_identity", "qrels"))
        return getattr(self.scorer(self.work.tasks[0]), "identity", self.spec)

    @property
    def simulation(self) -> bool:
        """A label scorer run on evaluated queries as a controlled simulation (noisy-qrels)."""
        return bool(getattr(self.scorer(self.work.tasks[0]), "simulation", False))

    def judge(self, task_name: str, query: str, doc_ids: list[str]) -> Any:
        """Rewards of a free-text query (qdrant-rf's synthetic document-queries)."""
        from tttembed.score.base import Item
        from tttembed.ttt.rewards import doc_items

        task = next(t for t in self.work.tasks if t.name == task_name)
        t = time.perf_counter()
        got = self.scorer(task).score(Item("qdrant-rf-synthetic", query),
                                      doc_items(doc_ids, task.corpus))
        self.requested += len(doc_ids)
        self.seconds += time.perf_counter() - t
        return got

    @property
    def paid(self) -> int:
        return sum(int(getattr(s, "paid", 0)) for s in self._scorers.values())

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> Rewards:
        from tttembed.ttt import QuerySet, score_plan_pairs

        t = time.perf_counter()
        by_task: dict[str, list[tuple[str, str]]] = {}
        for key, did in pairs:
            by_task.setdefault(key.split("/", 1)[0], []).append((key, did))
        out: Rewards = {}
        for task in self.work.tasks:
            got = by_task.get(task.name)
            if not got:
                continue
            qs = QuerySet.from_tasks({task.name: {**task.train_queries, **task.queries}})
            out.update(score_plan_pairs(got, qs, task.corpus, self.scorer(task)))
        self.requested += len(pairs)
        self.seconds += time.perf_counter() - t
        return out


SIMULATION_NOTE = (
    "fixed protocol with a label scorer: rewards of the evaluated queries come from their "
    "own judgments (degraded by known noise): a controlled simulation of a reranker of known "
    "quality, as the seed scores the evaluated queries with Qwen3-Reranker; not a transfer "
    "result")
