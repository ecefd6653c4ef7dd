"""The chain learner's process (``tttembed loop --chain CHAIN_REGISTRY``): judge the
stored chain searches' lists within the budget and the rate, run a chain learning cycle
(:mod:`tttembed.loop.chain_learn`) every ``--learn-every`` new rewards or when the judge
has nothing left to pay, until SIGTERM/SIGINT (``--once``: until the first cycle).

It shares the state loop's parts: the feedback store (``--store``, default the state
registry's), the judge and its ledger (``--judge``), the store's spend account within
``--judge-budget`` (what a state learner paid counts too: one budget; a fifth of it is
kept for the promotion check's pairs), the rate
(``--judge-rpm``) and ``--min-queries``. A step that fails (the judge down, the store
away) is one log line and is tried again; every reward answered before is committed and
never paid twice.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from tttembed.core.errors import ConfigError
from tttembed.loop.chain_learn import ChainLearner
from tttembed.loop.chain_rows import ChainCycle
from tttembed.loop.config import LoopConfig
from tttembed.loop.failures import configure_log
from tttembed.loop.judge import BackgroundJudge, Bucket, BudgetSpent
from tttembed.loop.open import open_store
from tttembed.loop.run import STEP_PAIRS, lower_priority
from tttembed.loop.store import Store

log = logging.getLogger("tttembed.loop")


def open_chain_registry(spec: str, index: Any) -> Any:
    """The chain registry ``spec`` (made for ``index``); a state registry or a missing
    one is a one-line ConfigError."""
    from tttembed.registry.base import index_record
    from tttembed.registry.chain import is_chain
    from tttembed.registry.open import open_registry

    registry = open_registry(spec)
    if not is_chain(registry.manifest):
        raise ConfigError(f"--chain {spec}: this registry holds learned states, not chain "
                          "encoders; give --chain a chain registry (`tttembed states add "
                          "FOLDER CHECKPOINT` makes one) and --registry the state registry")
    registry.check_index(index_record(index))
    return registry


def unreachable(config: LoopConfig) -> str:
    """Why ``--min-queries`` cannot be reached by the promotion check's share of the
    budget (each held-out question needs at least one pair), or "" when it can."""
    from tttembed.loop.chain_rows import HOLD_OUT

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
        self.judge.recover()  # what a kill left reserved: given back or kept as paid
        embedder = index_embedder(self.index, None)

        def frozen(texts: list[str]) -> Any:
            return embedder.encode(list(texts), "query")

        passages = [doc_text(corpus[d]) for d in self.index.doc_ids]
        self.learner = ChainLearner(config, self.registry, self.store, self.index,
                                    self.judge, frozen, passages)
        self.bucket = Bucket(config.judge_rpm)
        if never := unreachable(config):
            log.warning("%s", never)
        self.stop = threading.Event()
        self.new = 0        # pairs paid since the last cycle
        self.cycles: list[ChainCycle] = []

    def budget_left(self) -> int:
        """Pairs the training's judging may still pay: the budget but the promotion
        check's share (one pair in :data:`~tttembed.loop.chain_rows.HOLD_OUT`, as one
        question in that many is held out for it), less what was paid."""
        from tttembed.loop.chain_rows import HOLD_OUT

        spent = self.store.spent()
        budget = self.config.judge_budget
        check = max(budget // HOLD_OUT - spent.get("validation", 0), 0)
        return max(budget - check - sum(spent.values()), 0)

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
            _, paid = self.judge.pay(todo[:n])
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

    def run_cycle(self) -> ChainCycle:
        cycle = self.learner.cycle()
        self.new = 0
        self.cycles.append(cycle)
        log.info("chain cycle: %s%s", f"{cycle.version} " if cycle.version else "",
                 cycle.reason)
        return cycle

    def run(self, *, once: bool = False) -> None:
        """Until stopped (``once``: until the first cycle ran)."""
        while not self.stop.is_set():
            wait = self.config.poll_s
            try:
                if self.step(once=once) is not None and once:
                    return
            except Exception as exc:  # noqa: BLE001  (keep learning; say why, once a step)
                if once:
                    raise
                log.error("chain learner: %s (tried again in %g s; nothing answered is "
                          "lost or paid twice)", " ".join(f"{type(exc).__name__}: "
                                                          f"{exc}".split()), wait)
            self.stop.wait(wait)

    def close(self) -> None:
        self.store.close()
        self.registry.close()


def run_chain_loop(config: LoopConfig, chain: str, *, once: bool = False) -> None:
    """``tttembed loop --chain``: run until SIGTERM/SIGINT (``once``: one cycle)."""
    configure_log()
    lower_priority(config.nice)
    loop = ChainLoop(config, chain)
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: loop.stop.set())
        loop.run(once=once)
    finally:
        loop.close()


__all__ = ["ChainLoop", "open_chain_registry", "run_chain_loop", "unreachable"]
