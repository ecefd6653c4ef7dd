"""The learner's process (``tttembed loop``, or the child ``serve --learn`` starts): judge
pending served pairs within the budget and rate, run a learning cycle every
``learn_every`` new rewards (after a drift audit), and keep ``DIR/loop.json`` current
(what ``GET /v1/loop`` reports on every replica).

Each concern has its module: the status record (:mod:`~tttembed.loop.status`), the new
rows and the pairs to judge next (:mod:`~tttembed.loop.pending`, incremental: a step
costs what is new), paying within the budget (:mod:`~tttembed.loop.judge`, reserved in
the store's spend account first), the drift audit (:mod:`~tttembed.loop.auditor`),
freezing (:mod:`~tttembed.loop.freeze`) and the cycle (:mod:`~tttembed.loop.learner`).

It runs at a lower CPU priority (``nice``) with one torch thread by default, so that on
a small machine serving keeps its latency while a cycle runs; the priority and the stop
(a grace, then a forced exit) are :mod:`~tttembed.loop.process`'s.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from tttembed.core.errors import ConfigError, TTTEmbedError
from tttembed.core.http import for_command
from tttembed.core.io import now_utc
from tttembed.loop.auditor import Auditor
from tttembed.loop.clicks.feed import ClickFeed
from tttembed.loop.config import LoopConfig
from tttembed.loop.coordination import LockLost, open_coordination
from tttembed.loop.drift import audit_source
from tttembed.loop.failures import Failures, OncePerKind, configure_log, through_outage
from tttembed.loop.freeze import apply_audit, thawed_by_user
from tttembed.loop.judge import BackgroundJudge, Bucket, BudgetSpent, Triple
from tttembed.loop.learner import Cycle, Learner
from tttembed.loop.nojudge import NoScorer
from tttembed.loop.online import OnlineTest
from tttembed.loop.open import open_store
from tttembed.loop.pending import LRU, MAX_QUERIES, PendingQueue, Traffic
from tttembed.loop.process import lower_priority, stopper
from tttembed.loop.pruner import Pruner
from tttembed.loop.status import (
    HEARTBEAT_S,
    LoopState,
    beat,
    read_status_checked,
    spend_from,
    write_status,
)
from tttembed.loop.store import SearchLog, Store
from tttembed.registry.base import index_record
from tttembed.registry.open import open_registry

log = logging.getLogger("tttembed.loop")
#: Pairs paid in one step at most.
STEP_PAIRS = 32
#: Base lists of embeddings traffic kept (LRU).
BASE_CACHE = 10_000
#: Seconds between status writes when nothing but the time changed.
STATUS_EVERY_S = 5.0


class Loop:
    """The learner's main loop over one :class:`LoopConfig`."""

    def __init__(self, config: LoopConfig, *, store: Store | None = None) -> None:
        from tttembed.index.embedder import index_embedder
        from tttembed.index.store import load_index
        from tttembed.score.base import uses_labels
        from tttembed.ttt.rewards import corpus_for_index
        from tttembed.ttt.scorer import load_scorer

        if uses_labels(config.judge):
            raise ConfigError(f"--judge {config.judge}: a judge that reads judgments by "
                              "query id cannot score live traffic (texts only); use a "
                              "reranker, an LLM judge, bm25 or a rerank: service")
        if config.audit:
            audit_source(config.audit)  # a wrong --audit fails here, before paying
        self.config = config
        self.index = load_index(config.index)
        self.registry = open_registry(config.registry, create=True,
                                      index=index_record(self.index),
                                      cache=config.registry_cache)
        self.coordination = open_coordination(self.registry)
        self.store = store or open_store(config.store, config.registry)
        self.corpus = corpus_for_index(self.index, config.corpus)
        self.scorer = load_scorer(config.judge, index=self.index, corpus=self.corpus) \
            if config.has_judge else NoScorer()
        self.judge = BackgroundJudge(self.scorer, self.corpus, self.store,
                                     budget=config.judge_budget)
        embedder = index_embedder(self.index, None)
        self.clicks = None if config.clicks == "off" else ClickFeed(
            self.store, mode=config.clicks, settle_s=config.click_settle_s, seed=config.seed)
        self.online = OnlineTest(self.registry, self.clicks, self.coordination) \
            if config.interleave > 0 and self.clicks is not None else None
        self.learner = Learner(config, self.registry, self.store, self.index, embedder,
                               self.judge, clicks=self.clicks, online=self.online)
        self.auditor = Auditor(config, self.scorer, self.corpus, self.store, self.index,
                               embedder)
        self.auditor.prepare()  # the audit set read (and checked) before any judging
        found, broken = read_status_checked(self.coordination)
        if broken:
            log.warning("%s: the previous status could not be read, so its audit history "
                        "starts anew (the budget's spend is the store's: nothing is lost)",
                        broken)
        self.state = kept_state(found, config)
        self.state.audit_share = config.audit_share
        self.state.host = socket.gethostname()
        self.failures = Failures()
        # a store from before the spend account: what it paid (and the re-scores the old
        # status counted) opens the account, once; a database restart meanwhile waited out
        through_outage(lambda: self.store.open_account(self.state.drift_pairs), "start-up")
        through_outage(lambda: self.judge.close_open("a kill"), "start-up")
        self.bucket = Bucket(config.judge_rpm)
        self.stop = threading.Event()
        #: set when another learner took the learner lock (this one then stops)
        self.lost: LockLost | None = None
        self._base: LRU[tuple[str, ...]] = LRU(BASE_CACHE)
        self._written: dict[str, Any] = {}
        self._written_at = 0.0
        self.pruner = learner_pruner(config)
        self.traffic = Traffic(self.store, PendingQueue(depth=config.judge_depth,
                                                        max_queries=MAX_QUERIES),
                               self._served_list)

    # -- status -------------------------------------------------------------------
    def spent(self) -> int:
        """Judge pairs paid so far (the store's spend account: every learner, every run)."""
        return sum(self.store.spent().values())

    def budget_left(self) -> int:
        return max(self.config.judge_budget - self.spent(), 0)

    def save(self, *, force: bool = True) -> None:
        """Write the status (without ``force``: only when something but the time changed,
        or :data:`STATUS_EVERY_S` after the last write)."""
        s = self.state
        spend_from(self.store, s)
        s.caches = {**self.traffic.sizes(), "base_lists": len(self._base)}
        s.clicks = self._click_status()
        s.retention = self.pruner.status()
        s.pid = os.getpid()
        same = {**s.as_dict(), "updated": "", "caches": {}}
        if not force and same == self._written and \
                time.monotonic() - self._written_at < STATUS_EVERY_S:
            return
        s.updated = now_utc()
        kept = {k: same[k] for k in _KEPT}
        durable = force or kept != {k: self._written.get(k) for k in _KEPT}
        write_status(self.coordination, s, sync=durable)  # what a restart takes over
        self._written, self._written_at = same, time.monotonic()

    # -- judging ------------------------------------------------------------------
    def _served_list(self, s: SearchLog) -> tuple[str, ...]:
        if s.ids:
            return s.ids

        def base() -> tuple[str, ...]:  # embeddings traffic: the base retrieval, run here
            from tttembed.loop.promote import top_lists

            x = self.learner.embedder.encode([s.query], "query")
            return tuple(top_lists(self.index, x, self.config.judge_depth)[0])

        return self._base.get((s.task, s.query), base)

    def pending(self, n: int = STEP_PAIRS) -> list[Triple]:
        """Read what is new in the store; the ``n`` best pending pairs."""
        self.traffic.update()
        return self.traffic.queue.top(n)

    def judge_step(self, pending: list[Triple], budget_left: int | None = None) -> int:
        """Pay the next pairs the budget and the rate allow; the count paid."""
        left = self.budget_left() if budget_left is None else budget_left
        want = min(len(pending), left, STEP_PAIRS)
        n = self.bucket.take(want) if want else 0
        if not n:
            return 0
        try:
            _, paid = self.judge.pay(pending[:n], trusted=not self.state.frozen)
        except BudgetSpent as exc:  # another learner spent it meanwhile
            log.info("%s", exc)
            return 0
        return paid

    # -- cycles -------------------------------------------------------------------
    def run_cycle(self, trigger: str) -> Cycle | None:
        s = self.state
        s.learning, started = True, time.monotonic()
        self.save()
        try:
            if s.frozen and thawed_by_user(s, self.registry):
                s.frozen, s.reason = False, ""
            view = self.learner.click_view()
            apply_audit(s, self.auditor.run(s.cycles, self.config.judge_budget, view,
                                            fresh=trigger != "re-audit"), self.store)
            self.learner.record_clicks(view, trusted=not s.frozen)
            if s.frozen:
                return None
            cycle = self.learner.cycle(self.budget_left(), frozen=s.frozen, trigger=trigger,
                                       new_pairs=self._rewarded() - s.rewards_at_cycle,
                                       view=view)
            s.cycles += 1
            s.last_cycle = {"version": cycle.version.name if cycle.version else None,
                            "promoted": cycle.promoted, "reason": cycle.reason,
                            "at": now_utc(), "validation_pairs": cycle.validation_pairs,
                            "seconds": round(time.monotonic() - started, 2)}
            said = bool(s.promotion_waiting)
            s.promotion_waiting = cycle.waiting
            if cycle.waiting and not said:
                log.info("promotions wait: %s (%s)", cycle.waiting["message"], cycle.reason)
            log.log(logging.DEBUG if cycle.waiting and said else logging.INFO,
                    "cycle %d (%.1f s): %s", s.cycles, time.monotonic() - started,
                    cycle.reason)
            return cycle
        finally:
            s.rewards_at_cycle = self._rewarded()
            s.learning = False
            self.save()

    def _rewarded(self) -> int:
        """Rewards and labels in the store and clicks read (incrementally)."""
        self.traffic.update()
        return self.traffic.rewarded + self._clicks()

    def _clicks(self) -> int:
        if self.clicks is None:
            return 0
        self.clicks.refresh()
        return self.clicks.clicks

    def _click_status(self) -> dict[str, Any]:
        if self.clicks is None:
            return {"mode": "off"}
        view = self.learner.last_clicks
        return {"mode": self.clicks.mode, "read": self.clicks.clicks,
                "window": len(self.clicks.window), "stored": self.learner.click_rows,
                **(view.to_dict() if view is not None else {})}

    def _online_step(self) -> bool:
        """Advance the candidate's interleaving test; whether one is still running (no
        new candidate is learned meanwhile)."""
        if self.online is None:
            return False
        verdict = self.online.step()
        s = self.state
        s.online = verdict.as_dict() if verdict is not None else {}
        if verdict is not None and verdict.decision != "undecided":
            log.info("candidate %s: %s", verdict.candidate, verdict.reason())
        return verdict is not None and verdict.decision == "undecided"

    def step(self) -> None:
        """One turn: read what is new, judge what is allowed, then learn when due (the
        rewards paid now are read on the next turn)."""
        pending = self.pending()
        budget_left = self.budget_left()
        paid = self.judge_step(pending, budget_left)
        budget_left -= paid
        s = self.state
        clicks = self._clicks()
        testing = self._online_step()
        new = self.traffic.rewarded + clicks - s.rewards_at_cycle
        s.pending = max(self.traffic.queue.total - paid, 0)
        drained = not s.pending or budget_left <= 0
        due = not testing and (new >= self.config.learn_every or
                               (new > 0 and drained and not paid and self.config.has_judge))
        reaudit = (s.frozen and budget_left > 0
                   and time.time() - s.audited_at >= self.config.reaudit_s)
        if due or reaudit:
            self.run_cycle("learn-every" if new >= self.config.learn_every else
                           "drained" if due else "re-audit")
            new = self.traffic.rewarded + clicks - s.rewards_at_cycle
            s.pending = max(self.traffic.queue.total, 0)
        s.idle = drained and new <= 0 and not paid and not s.learning
        self.save(force=False)

    def run(self) -> None:
        log.info("learning into %s from %s (judge %s, budget %d pairs, %g a minute)",
                 self.registry.location, self.store.url, self.config.judge,
                 self.config.judge_budget, self.config.judge_rpm)
        through_outage(self.save, "start-up")
        heart = threading.Thread(target=self._heartbeat, name="loop-heartbeat", daemon=True)
        heart.start()
        self.pruner.start()
        while not self.stop.is_set():
            wait = self.config.poll_s
            try:
                self.step()
                self.state.error = ""
                self.failures.ok()
            except Exception as exc:  # noqa: BLE001  (keep learning; say why in the status)
                told = for_command(exc, "loop")  # loop has no --timeout: the true hint
                self.state.error = " ".join(f"{type(exc).__name__}: {told}".split())
                wait = self.failures.failed(told, self.config.poll_s)
                try:
                    self.save()
                except (TTTEmbedError, OSError) as why:  # the store (or registry) is down
                    log.warning("status not written: %s", " ".join(str(why).split()))
            self.stop.wait(wait)

    def _heartbeat(self) -> None:
        """Touch the heartbeat file every HEARTBEAT_S s (liveness, :mod:`.status`); a
        failing beat logged once per kind until one is written again."""
        said = OncePerKind("heartbeat not written")
        while not self.stop.is_set():
            try:
                beat(self.coordination)
                said.ok()
            except LockLost as exc:
                self.lost = exc
                self.stop.set()
                return
            except (OSError, TTTEmbedError) as exc:
                said.failed(exc)
            self.stop.wait(HEARTBEAT_S)

    def close(self) -> None:
        self.pruner.close()
        self.store.close()
        self.registry.close()


def learner_pruner(config: LoopConfig) -> Pruner:
    """The learner's pruner: the store by ``--retain``, the registry by
    ``--keep-versions``, each on a connection of its own."""
    return Pruner(lambda: open_store(config.store, config.registry), config.retention,
                  name="learner-pruner",
                  open_registry=lambda: open_registry(config.registry,
                                                      cache=config.registry_cache))


#: What a restarted learner takes over from ``loop.json`` (the rest is measured anew;
#: the budget's spend is the store's).
_KEPT = ("frozen", "reason", "frozen_at", "last_ok_audit", "audited_at", "audits", "cycles",
         "rewards_at_cycle", "last_cycle", "drift_pairs")


def kept_state(record: LoopState | None, config: LoopConfig) -> LoopState:
    """The record a (re)started learner begins with: what it takes over, and what its
    configuration says."""
    state = LoopState(**{k: getattr(record, k) for k in _KEPT}) \
        if record is not None else LoopState()
    state.judge_budget, state.min_queries = config.judge_budget, config.min_queries
    state.judge_audited, state.audit = bool(config.audit), config.audit or ""
    state.has_judge = config.has_judge
    state.click_settle_s = config.click_settle_s if config.clicks != "off" else -1.0
    return state


def run_loop(config: LoopConfig) -> None:
    """``tttembed loop``: run until SIGTERM/SIGINT (the step in flight gets
    :data:`~tttembed.loop.process.GRACE_S` seconds to finish; past them the process exits
    with :data:`~tttembed.loop.process.FORCED_EXIT`). The store is closed on every way
    out."""
    configure_log()
    lower_priority(config.nice)
    loop = Loop(config)
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stopper(loop))
        with loop.coordination.learner_lock():  # one learner per registry
            loop.run()
        if loop.lost is not None:
            raise loop.lost
    finally:
        loop.close()


__all__ = ["Loop", "kept_state", "run_loop"]
