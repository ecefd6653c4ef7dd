"""The learner's process (``tttembed loop``, or the child ``serve --learn`` starts): judge
pending served pairs within the budget and rate, run a learning cycle every
``learn_every`` new rewards (after a drift audit), and keep ``DIR/loop.json`` current
(what ``GET /v1/loop`` reports on every replica).

It runs at a lower CPU priority (``nice``) with one torch thread by default, so that on
a small machine serving keeps its latency while a cycle runs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError
from tttembed.core.io import now_utc, read_json, write_json
from tttembed.loop.config import LoopConfig
from tttembed.loop.drift import Audit, audit_set, judge_audit, rescore, roc_auc, sample_pairs
from tttembed.loop.judge import Bucket, Judge, Triple, pending_pairs
from tttembed.loop.learner import Cycle, Learner
from tttembed.loop.store import Reward, SearchLog, Store, open_store
from tttembed.registry.versions import Registry, index_record

log = logging.getLogger("tttembed.loop")
STATUS_FILE = "loop.json"


@dataclass
class LoopState:
    """What ``DIR/loop.json`` holds (the learner writes it; every replica reads it)."""

    learning: bool = False
    idle: bool = False
    pending: int = 0
    pairs_judged: int = 0
    drift_pairs: int = 0
    judge_budget: int = 0
    judge_budget_left: int = 0
    frozen: bool = False
    reason: str = ""
    frozen_at: float = 0.0
    last_ok_audit: float = 0.0
    audited_at: float = 0.0
    audits: list[dict[str, Any]] = field(default_factory=list)
    cycles: int = 0
    rewards_at_cycle: int = 0
    last_cycle: dict[str, Any] = field(default_factory=dict)
    pid: int = 0
    updated: str = ""
    error: str = ""


def read_status(registry: str | Path) -> dict[str, Any]:
    path = Path(registry) / STATUS_FILE
    if not path.exists():
        return {}
    try:
        got = read_json(path, what="loop status")
    except Exception:  # noqa: BLE001  (a reader never fails on the learner's file)
        return {}
    return got if isinstance(got, dict) else {}


class Loop:
    """The learner's main loop over one :class:`LoopConfig`."""

    def __init__(self, config: LoopConfig, *, store: Store | None = None) -> None:
        from tttembed.index.embedder import index_embedder
        from tttembed.index.store import open_index
        from tttembed.score.base import uses_labels
        from tttembed.ttt.rewards import corpus_for_index
        from tttembed.ttt.scorer import load_scorer

        if uses_labels(config.judge):
            raise ConfigError(f"--judge {config.judge}: a judge that reads judgments by "
                              "query id cannot score live traffic (texts only); use a "
                              "reranker, an LLM judge, bm25 or a rerank: service")
        self.config = config
        self.index = open_index(config.index)
        self.registry = Registry(config.registry, create=True, index=index_record(self.index))
        self.store = store or open_store(config.store, config.registry)
        self.corpus = corpus_for_index(self.index, config.corpus)
        self.scorer = load_scorer(config.judge, index=self.index, corpus=self.corpus)
        self.judge = Judge(self.scorer, self.corpus, self.store)
        self.learner = Learner(config, self.registry, self.store, self.index,
                               index_embedder(self.index, None), self.judge)
        self.state = LoopState(**_known(read_status(config.registry)))
        self.state.judge_budget = config.judge_budget
        self.bucket = Bucket(config.judge_rpm)
        self.stop = threading.Event()
        self._base: dict[tuple[str, str], tuple[str, ...]] = {}
        self._audit: list[tuple[str, str, int]] | None = None

    # -- status -------------------------------------------------------------------
    def spent(self) -> int:
        return int(self.store.counts()["paid"]) + self.state.drift_pairs

    def save(self) -> None:
        s = self.state
        s.pairs_judged = self.spent()
        s.judge_budget_left = max(self.config.judge_budget - s.pairs_judged, 0)
        s.pid, s.updated = os.getpid(), now_utc()
        write_json(Path(self.config.registry) / STATUS_FILE, asdict(s))

    # -- judging ------------------------------------------------------------------
    def _served_list(self, s: SearchLog) -> tuple[str, ...]:
        if s.ids:
            return s.ids
        key = (s.task, s.query)
        if key not in self._base:  # embeddings traffic: the base retrieval, run here
            from tttembed.loop.promote import top_lists

            x = self.learner.embedder.encode([s.query], "query")
            self._base[key] = tuple(top_lists(self.index, x, self.config.judge_depth)[0])
        return self._base[key]

    def pending(self) -> list[Triple]:
        judged = {(f.task, f.query, f.doc_id): float(f.label) for f in self.store.feedback()}
        judged.update({(r.task, r.query, r.doc_id): float(r.reward)
                       for r in self.store.rewards(trusted_only=False)})
        return pending_pairs(self.store.searches(), judged, self._served_list,
                             depth=self.config.judge_depth, now=time.time())

    def judge_step(self, pending: list[Triple]) -> int:
        """Pay the next pairs the budget and the rate allow; the count paid."""
        left = self.config.judge_budget - self.spent()
        want = min(len(pending), max(left, 0), 32)
        n = self.bucket.take(want) if want else 0
        if not n:
            return 0
        _, paid = self.judge.pay(pending[:n], trusted=not self.state.frozen)
        return paid

    # -- cycles -------------------------------------------------------------------
    def audit(self) -> Audit:
        """Re-score a sample of past judge rewards; freeze or thaw (module docs of drift)."""
        budget = max(self.config.judge_budget - self.spent(), 0)
        sample = sample_pairs(self.store.rewards(trusted_only=True),
                              min(self.config.drift_sample, budget),
                              self.config.seed + self.state.cycles)
        auc = self._people_auc()
        if not sample:
            return judge_audit(np.zeros(0), np.zeros(0), threshold=self.config.drift_threshold,
                               auc=auc, min_auc=self.config.audit_min_auc)
        inner = getattr(self.scorer, "inner", self.scorer)
        new = rescore(inner, self.corpus, sample)
        self.state.drift_pairs += len(sample)
        return judge_audit(np.array([r.reward for r in sample]), new,
                           threshold=self.config.drift_threshold, auc=auc,
                           min_auc=self.config.audit_min_auc)

    def _people_auc(self) -> float | None:
        """The judge's AUC on the audit set, scored afresh (None without ``--audit``)."""
        if not self.config.audit:
            return None
        if self._audit is None:
            self._audit = audit_set(self.config.audit, self.index, self.learner.embedder)
        pairs = [Reward("audit", q, d, float(g), 0.0) for q, d, g in self._audit]
        new = rescore(getattr(self.scorer, "inner", self.scorer), self.corpus, pairs)
        self.state.drift_pairs += len(pairs)
        labels = np.array([r.reward for r in pairs])
        ok = np.isfinite(new)
        return roc_auc(new[ok], labels[ok])

    def _apply_audit(self, audit: Audit) -> None:
        s, now = self.state, time.time()
        s.audited_at = now
        blank = not audit.pairs and audit.auc is None  # nothing re-scored: no evidence
        entry = {**audit.as_dict(), "at": now_utc()}
        s.audits = [*s.audits[-9:], {**entry, "passed": None} if blank else entry]
        if blank:
            if s.frozen and "no judge budget left" not in s.reason:
                s.reason += " (no judge budget left to audit again)"
            return
        if not audit.passed:
            if not s.frozen:
                distrusted = self.store.distrust(s.last_ok_audit)
                log.warning("promotions frozen: %s (%d rewards since the last passing "
                            "audit distrusted)", audit.reason, distrusted)
                s.frozen_at = now
            s.frozen, s.reason = True, audit.reason
            return
        s.last_ok_audit = now
        if s.frozen:
            log.info("promotions resume: the judge agrees again")
        s.frozen, s.reason = False, ""

    def _thawed_by_user(self) -> bool:
        history = self.registry.served_record().get("history", [])
        return any(h.get("by") == "user" and h.get("action") == "promote"
                   and float(h.get("time", 0)) > self.state.frozen_at for h in history)

    def run_cycle(self, trigger: str) -> Cycle | None:
        s = self.state
        s.learning = True
        self.save()
        try:
            if s.frozen and self._thawed_by_user():
                s.frozen, s.reason = False, ""
            self._apply_audit(self.audit())
            if s.frozen:
                return None
            left = max(self.config.judge_budget - self.spent(), 0)
            cycle = self.learner.cycle(left, frozen=s.frozen, trigger=trigger,
                                       new_pairs=self._reward_count() - s.rewards_at_cycle)
            s.cycles += 1
            s.last_cycle = {"version": cycle.version.name if cycle.version else None,
                            "promoted": cycle.promoted, "reason": cycle.reason,
                            "at": now_utc(), "validation_pairs": cycle.validation_pairs}
            log.info("cycle %d: %s", s.cycles, cycle.reason)
            return cycle
        finally:
            s.rewards_at_cycle = self._reward_count()
            s.learning = False
            self.save()

    def _reward_count(self) -> int:
        c = self.store.counts()
        return int(c["rewards"]) + int(c["feedback"])

    def step(self) -> None:
        """One turn: judge what is allowed, then learn when due."""
        pending = self.pending()
        paid = self.judge_step(pending)
        s = self.state
        new = self._reward_count() - s.rewards_at_cycle
        s.pending = max(len(pending) - paid, 0)
        budget_left = self.config.judge_budget - self.spent()
        drained = not s.pending or budget_left <= 0
        due = new >= self.config.learn_every or (new > 0 and drained and not paid)
        reaudit = (s.frozen and budget_left > 0
                   and time.time() - s.audited_at >= self.config.reaudit_s)
        if due or reaudit:
            self.run_cycle("learn-every" if new >= self.config.learn_every else
                           "drained" if due else "re-audit")
            new = self._reward_count() - s.rewards_at_cycle
        s.idle = drained and new <= 0 and not s.learning
        self.save()

    def run(self) -> None:
        log.info("learning into %s from %s (judge %s, budget %d pairs, %g a minute)",
                 self.config.registry, self.store.url, self.config.judge,
                 self.config.judge_budget, self.config.judge_rpm)
        self.save()
        while not self.stop.is_set():
            try:
                self.step()
                self.state.error = ""
            except Exception as exc:  # noqa: BLE001  (keep learning; say why in the status)
                log.exception("loop step failed")
                self.state.error = f"{type(exc).__name__}: {exc}"
                self.save()
            self.stop.wait(self.config.poll_s)


#: What a restarted learner takes over from ``loop.json`` (the rest is measured anew).
_KEPT = ("frozen", "reason", "frozen_at", "last_ok_audit", "audited_at", "audits", "cycles",
         "rewards_at_cycle", "last_cycle", "drift_pairs")


def _known(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k in _KEPT}


#: Seconds the step in flight gets after SIGTERM/SIGINT before the process exits anyway
#: (a judge that stopped answering keeps its client retrying; every reward it answered is
#: already committed, so an exit loses only the request in flight).
GRACE_S = 5.0


def _stopper(loop: Loop) -> Any:
    def stop(*_: Any) -> None:
        loop.stop.set()
        timer = threading.Timer(GRACE_S, os._exit, args=(0,))
        timer.daemon = True
        timer.start()

    return stop


def run_loop(config: LoopConfig) -> None:
    """``tttembed loop``: run until SIGTERM/SIGINT (the step in flight gets
    :data:`GRACE_S` seconds to finish)."""
    if config.nice:
        try:
            os.nice(config.nice)
        except OSError:
            pass
    loop = Loop(config)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopper(loop))
    loop.run()


__all__ = ["STATUS_FILE", "Loop", "LoopState", "read_status", "run_loop"]
