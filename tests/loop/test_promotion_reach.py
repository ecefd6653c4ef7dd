"""Safe defaults that can still promote (issue 49, section 2): when the traffic holds
enough judged queries, the promotion check pays (within the validation share of the
judge budget and the budget left) to reach ``--min-queries``; when it cannot, the status
(``promotion_waiting``) and the log say once what is missing."""

from __future__ import annotations

import logging

import pytest

from tests.loop.test_loop import (  # noqa: F401  (world: fixture)
    QUERIES,
    TASK,
    Judgments,
    _loop,
    _until_idle,
    world,
)
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")


def _log_top5(store, world_) -> None:  # noqa: ANN001
    """Each query served once with its raw top 8 (the relevant document at rank 4): the
    judge pays those; a candidate's top 10 then holds documents never judged."""
    import time

    from tttembed.loop.store import SearchLog

    now = time.time()
    store.log_searches([SearchLog(f"s{i}-{now}", TASK, q, now, None,
                                  tuple(world_["raw"][q][:8])) for i, q in enumerate(QUERIES)])


def test_the_promotion_check_pays_to_reach_min_queries(world, tmp_path, monkeypatch):  # noqa: F811
    """8 judged queries (8 pairs each), --min-queries 7: the tenth of the cycle's 64
    rewards judges no changed query's new documents (refused: fewer than 7 queries); the
    check pays on, within the validation share of the budget, until the test has 7."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=1000,
                     min_queries=7)
        _log_top5(loop.store, world)
        _until_idle(loop)
    (v1,) = loop.registry.versions()
    ev = v1.manifest["evidence"]
    assert ev["queries"] >= 7, v1.manifest["reason"]
    assert v1.promoted, v1.manifest["reason"]
    assert loop.store.spent().get("validation", 0) <= 0.1 * 1000
    assert not loop.state.promotion_waiting


def test_too_few_judged_queries_are_said_once(world, tmp_path, monkeypatch, caplog):  # noqa: F811
    """8 judged queries, --min-queries 20 (the default): no budget reaches 20, so the
    status says how many more judged queries are needed and the pairs left, and the log
    says it once over several cycles."""
    from tttembed.loop.status import loop_status

    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.INFO, logger="tttembed.loop")
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=1000,
                     min_queries=20)
        _log_top5(loop.store, world)
        _until_idle(loop)
        loop.run_cycle("learn-every")
        loop.run_cycle("learn-every")
        status = loop_status(loop.registry, loop.store)
    waiting = status["promotion_waiting"]
    assert waiting["needed"] == 20 - len(QUERIES) and waiting["queries"] == len(QUERIES)
    left = status["judge_budget_left"]
    assert waiting["message"] == (f"{20 - len(QUERIES)} more judged queries needed; "
                                  f"{left:,} pairs left"), waiting
    said = [r for r in caplog.records if "more judged queries needed" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
