"""Audits within their share of the judge budget (issue 49, section 1): the people's
audit set is scored through the reward ledger (pairs it holds are free: an unchanged
judge costs nothing to audit again), the drift sample is re-scored at most once per
learning cycle, never by the timed re-audit, and all audits together stay within
``--audit-share`` of the budget, shown in ``/v1/loop``'s ``budget``."""

from __future__ import annotations

import pytest

from tests.loop.test_loop import (  # noqa: F401  (world: fixture)
    Judgments,
    _log_traffic,
    _loop,
    _until_idle,
    audit_folder,
    world,
)
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")


def _audits(loop) -> int:  # noqa: ANN001
    spent = loop.store.spent()
    return spent.get("audit", 0) + spent.get("drift", 0)


def test_audits_stay_within_their_share_and_an_unchanged_judge_is_reread_free(
        world, tmp_path, monkeypatch):  # noqa: F811
    from tttembed.loop.status import loop_status

    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    spec = audit_folder(world, tmp_path / "people")
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path, server, learn_every=200, judge_budget=400,
                     audit=spec, drift_sample=20)
        _log_traffic(loop.store, world)
        _until_idle(loop)
        first = _audits(loop)
        before = server.count()
        loop.run_cycle("re-audit")  # the timed re-audit: re-reads, re-scores nothing
        loop.run_cycle("re-audit")
        assert server.count() == before and _audits(loop) == first, loop.store.spent()
        for _ in range(4):  # learning cycles: one drift sample each, within the share
            _log_traffic(loop.store, world)
            loop.run_cycle("learn-every")
        status = loop_status(loop.registry, loop.store)
    assert _audits(loop) <= 0.2 * 400, loop.store.spent()
    assert status["budget"]["audit_share"] == 0.2
    assert status["budget"]["audit_cap"] == 80
    assert status["budget"]["audit_pairs"] == _audits(loop)
    assert [a["auc"] for a in status["audits"]] and all(
        a["auc"] == status["audits"][0]["auc"] for a in status["audits"])


def test_the_audit_share_is_an_option_the_learner_child_gets_and_is_checked():
    from tttembed.core.errors import ConfigError
    from tttembed.loop.config import LoopConfig

    config = LoopConfig(registry="r", index="i", judge="bm25", judge_budget=2000,
                        audit_share=0.1)
    argv = config.argv()
    assert argv[argv.index("--audit-share") + 1] == "0.1" and config.audit_cap == 200
    assert LoopConfig(registry="r", index="i", judge="bm25").audit_share == 0.2
    with pytest.raises(ConfigError, match=r"--audit-share must be a fraction"):
        LoopConfig(registry="r", index="i", judge="bm25", audit_share=1.5)
