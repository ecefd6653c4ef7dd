"""The chain learner's process (``tttembed loop --chain CHAIN_REGISTRY``): judge the
stored chain searches' lists within the budget and the rate, run a chain learning cycle
(:mod:`tttembed.loop.chain.learn`) every ``--learn-every`` new rewards or when the judge
has nothing left to pay, until SIGTERM/SIGINT (``--once``: until the first cycle).

It shares the state loop's parts: the feedback store (``--store``, default the state
registry's), the judge and its ledger (``--judge``), the store's spend account within
``--judge-budget`` (what a state learner paid counts too: one budget; a fifth of it is
kept for the promotion check's pairs, and room for the next drift audit), the rate
(``--judge-rpm``) and ``--min-queries``. A step that fails (the judge down, the store
away) is one log line and is tried again; every reward answered before is committed and
never paid twice.

It keeps the state loop's drift audit (:class:`~tttembed.loop.auditor.Auditor`, on the
chain rewards only, within the same budget and ``--audit-share``; ``--drift-sample``,
``--drift-threshold``, ``--audit``): before a cycle learns, the judge re-scores a seeded
sample of its past chain rewards afresh, and when its answers changed (a swapped or
poisoned judge) promotions freeze (:func:`~tttembed.loop.freeze.apply_audit`): the cycle
learns and promotes nothing and says why, the rewards judged since the last passing
audit are distrusted, and what it pays meanwhile is kept untrusted until an audit
passes again (or a person promotes a version). Its status (frozen, why, the audits, the
last cycle, the spend) is the state loop's record, kept beside the chain registry
(``CHAIN/loop.json``: :func:`~tttembed.loop.status.loop_status` of the chain registry),
and a restart takes it over.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from tttembed.chain.forms import row_titles
from tttembed.core.errors import ConfigError
from tttembed.core.http import for_command
from tttembed.core.io import now_utc
from tttembed.loop.auditor import Auditor
from tttembed.loop.chain.learn import ChainLearner
from tttembed.loop.chain.rows import ChainCycle
from tttembed.loop.config import LoopConfig
from tttembed.loop.coordination import open_coordination
from tttembed.loop.failures import configure_log
from tttembed.loop.freeze import apply_audit, thawed_by_user
from tttembed.loop.judge import BackgroundJudge, Bucket, BudgetSpent
from tttembed.loop.open import open_store
from tttembed.loop.process import lower_priority
from tttembed.loop.pruner import Pruner
from tttembed.loop.rows import CHAIN_TASK
from tttembed.loop.run import STEP_PAIRS, kept_state
from tttembed.loop.status import read_status_checked, spend_from, write_status
from tttembed.loop.store import Store

log = logging.getLogger("tttembed.loop")


def check_chain_spec(spec: str) -> None:
    """A one-line ConfigError when ``spec`` cannot be a chain registry to learn into: a
    pinned ``REGISTRY@vN`` (a learner learns into the registry it follows) or a folder
    that does not exist (the registry is made by ``tttembed states add``)."""
    import re
    from pathlib import Path

    from tttembed.registry.postgres import is_url

    root, sep, version = spec.rpartition("@")
    if sep and re.fullmatch(r"v\d+", version):
        raise ConfigError(f"--chain {spec}: pins {version}, and a pin is not accepted "
                          "here: a learner learns into the registry it follows; give "
                          f"--chain {root} (to serve {version}, `tttembed states promote "
                          f"{root} {version}`)")
    if not is_url(spec) and not Path(spec).exists():
        raise ConfigError(f"--chain {spec}: no such folder; make the chain registry with "
                          f"`tttembed states add {spec} CHECKPOINT` (a checkpoint folder "
                          "`tttembed chain train` wrote)")


def open_chain_registry(spec: str, index: Any) -> Any:
    """The chain registry ``spec`` (made for ``index``); a state registry or a missing
    one is a one-line ConfigError."""
    from tttembed.registry.base import index_record
    from tttembed.registry.chain import is_chain
    from tttembed.registry.open import open_registry

    check_chain_spec(spec)
    registry = open_registry(spec)
    if not is_chain(registry.manifest):
        raise ConfigError(f"--chain {spec}: this registry holds learned states, not chain "
                          "encoders; give --chain a chain registry (`tttembed states add "
                          "FOLDER CHECKPOINT` makes one) and --registry the state registry")
    registry.check_index(index_record(index))
    return registry


def store_location(config: LoopConfig) -> str:
    """Where the chain learner keeps its rewards, as ``states list`` can name it: its
    ``--store``, or its ``--registry``'s (that folder, or that URL with the password
    masked)."""
    from pathlib import Path

    from tttembed.core.pg import mask_url

    where = str(config.store or config.registry or "")
    return str(Path(where).resolve()) if where and Path(where).exists() else mask_url(where)


def unreachable(config: LoopConfig) -> str:
    """Why ``--min-queries`` cannot be reached by the promotion check's share of the
    budget (each held-out question needs at least one pair), or "" when it can."""
    from tttembed.loop.chain.rows import HOLD_OUT

    share = config.judge_budget // HOLD_OUT
    if share >= config.min_queries:
        return ""
    return (f"--min-queries {config.min_queries} cannot be reached: the promotion check's "
            f"share of --judge-budget {config.judge_budget} ({share} pairs, one in "
            f"{HOLD_OUT}) pays fewer held-out questions, so no chain version will be "
            "promoted; raise --judge-budget or lower --min-queries")


class ChainLoop:
    """Judging and chain cycles over one :class:`LoopConfig` and chain registry."""

    def __init__(self, config: LoopConfig, chain: str, *, store: Store | None = None) -> None:
        from tttembed.data.beir import doc_text
        from tttembed.index.embedder import index_embedder
        from tttembed.index.store import load_index
        from tttembed.score.base import uses_labels
        from tttembed.ttt.rewards import corpus_for_index
        from tttembed.ttt.scorer import load_scorer

        check_chain_spec(chain)  # before the index and the judge are loaded
        if not config.has_judge or uses_labels(config.judge):
            raise ConfigError(f"--chain with --judge {config.judge}: chain learning pays a "
                              "judge that scores texts (a reranker, an LLM judge, bm25 or a "
                              "rerank: service)")
        self.config = config
        self.index = load_index(config.index)
        self.registry = open_chain_registry(chain, self.index)
        self.store = store or open_store(config.store, config.registry)
        corpus = corpus_for_index(self.index, config.corpus)
        scorer = load_scorer(config.judge, index=self.index, corpus=corpus)
        self.judge = BackgroundJudge(scorer, corpus, self.store, budget=config.judge_budget)
        self.judge.close_open("a kill")  # what a kill left: given back or kept as paid
        embedder = index_embedder(self.index, None)

        def frozen(texts: list[str]) -> Any:
            return embedder.encode(list(texts), "query")

        passages = [doc_text(corpus[d]) for d in self.index.doc_ids]
        self.learner = ChainLearner(config, self.registry, self.store, self.index,
                                    self.judge, frozen, passages,
                                    titles=row_titles(corpus, self.index.doc_ids))
        self.auditor = Auditor(config, scorer, corpus, self.store, self.index, embedder,
                               task=CHAIN_TASK)
        self.auditor.prepare()  # a wrong --audit fails here, before paying
        self.coordination = open_coordination(self.registry)
        found, broken = read_status_checked(self.coordination)
        if broken:
            log.warning("%s: the chain learner's previous status could not be read, so "
                        "its audit history starts anew", broken)
        self.state = kept_state(found, config)  # a freeze survives a restart
        self.state.audit_share = config.audit_share
        self.state.store = store_location(config)
        self.bucket = Bucket(config.judge_rpm)
        if never := unreachable(config):
            log.warning("%s", never)
        self.stop = threading.Event()
        # the chain registry's versions kept by --keep-versions (and the store by
        # --retain): a chain version holds an encoder's adapter files
        self.pruner = Pruner(lambda: open_store(config.store, config.registry),
                             config.retention, name="chain-pruner",
                             open_registry=lambda: open_chain_registry(chain, self.index))
        self.new = 0        # pairs paid since the last cycle
        self.cycles: list[ChainCycle] = []

    def budget_left(self) -> int:
        """Pairs the training's judging may still pay: the budget but the promotion
        check's share (one pair in :data:`~tttembed.loop.chain.rows.HOLD_OUT`, as one
        question in that many is held out for it) and room for the next drift audit's
        re-scores (within the audits' share), less what was paid."""
        from tttembed.loop.auditor import AUDIT_SOURCES
        from tttembed.loop.chain.rows import HOLD_OUT

        spent = self.store.spent()
        budget = self.config.judge_budget
        check = max(budget // HOLD_OUT - spent.get("validation", 0), 0)
        audits = sum(spent.get(k, 0) for k in AUDIT_SOURCES)
        audit = min(self.config.drift_sample, max(self.config.audit_cap - audits, 0))
        return max(budget - check - audit - sum(spent.values()), 0)

    def judge_step(self) -> tuple[int, bool]:
        """Pay the next pairs the budget and the rate allow: (paid, drained: nothing
        left to pay or no budget left)."""
        todo = self.learner.pending()
        left = self.budget_left()
        want = min(len(todo), left, STEP_PAIRS)
        if not want:
            return 0, True
        n = self.bucket.take(want)
        if not n:
            return 0, False
        try:
            _, paid = self.judge.pay(todo[:n], trusted=not self.state.frozen)
        except BudgetSpent as exc:
            log.info("%s", exc)
            return 0, True
        self.new += paid
        return paid, False

    def step(self, *, once: bool = False) -> ChainCycle | None:
        """One turn: judge what is allowed, then learn when due (``once``: also when the
        judge has nothing left to pay and nothing new was paid)."""
        paid, drained = self.judge_step()
        if self.new >= self.config.learn_every or (drained and (self.new > 0 or once)):
            return self.run_cycle()
        return None

    def audit(self) -> str:
        """The drift audit before a cycle learns (module docstring): why promotions are
        frozen, or "" when they are not."""
        s = self.state
        if s.frozen and thawed_by_user(s, self.registry):
            s.frozen, s.reason = False, ""
        apply_audit(s, self.auditor.run(s.cycles, self.config.judge_budget), self.store)
        if not s.frozen:
            return ""
        return (f"promotions frozen: {s.reason}; no chain version is learned or promoted "
                "until an audit finds the judge agreeing with its past answers again (or "
                "a person promotes a version)")

    def run_cycle(self) -> ChainCycle:
        s, started = self.state, time.monotonic()
        s.learning = True
        try:
            cycle = self.learner.cycle(self.audit)
        finally:
            s.learning = False
        self.new = 0
        self.cycles.append(cycle)
        if not s.frozen:
            s.cycles += 1
        s.last_cycle = {"version": cycle.version, "promoted": cycle.promoted,
                        "reason": cycle.reason, "at": now_utc(),
                        "validation_pairs": cycle.validation_pairs,
                        "seconds": round(time.monotonic() - started, 2)}
        self.save()
        level = logging.WARNING if s.frozen or cycle.failed else logging.INFO
        log.log(level, "chain cycle: %s%s", f"{cycle.version} " if cycle.version else "",
                cycle.reason)
        return cycle

    def save(self) -> None:
        """Write the chain learner's status beside the chain registry (the state loop's
        record: frozen, why, the audits, the last cycle, the spend)."""
        s = self.state
        spend_from(self.store, s)
        s.retention = self.pruner.status()
        s.pid, s.updated = os.getpid(), now_utc()
        write_status(self.coordination, s)

    def run(self, *, once: bool = False) -> None:
        """Until stopped (``once``: until the first cycle ran)."""
        self.save()
        if not once:
            self.pruner.start()
        while not self.stop.is_set():
            wait = self.config.poll_s
            try:
                if self.step(once=once) is not None and once:
                    return
            except Exception as exc:  # noqa: BLE001  (keep learning; say why, once a step)
                told = for_command(exc, "loop")  # loop has no --timeout: the true hint
                if once:
                    if told is exc:
                        raise
                    raise told from None
                log.error("chain learner: %s (tried again in %g s; nothing answered is "
                          "lost or paid twice)", " ".join(f"{type(exc).__name__}: "
                                                          f"{told}".split()), wait)
            self.stop.wait(wait)

    def close(self) -> None:
        self.pruner.close()
        self.store.close()
        self.registry.close()


def run_chain_loop(config: LoopConfig, chain: str, *, once: bool = False) -> None:
    """``tttembed loop --chain``: run until SIGTERM/SIGINT (``once``: one cycle). One
    chain learner per chain registry: a second one is refused, naming the first (two
    would pay nothing twice, but each would train and register its own candidate)."""
    configure_log()
    lower_priority(config.nice)
    loop = ChainLoop(config, chain)
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: loop.stop.set())
        with loop.coordination.learner_lock():
            loop.run(once=once)
    finally:
        loop.close()


__all__ = ["ChainLoop", "open_chain_registry", "run_chain_loop", "unreachable"]
