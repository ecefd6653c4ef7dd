"""A learner starting while PostgreSQL restarts: its start-up takes minutes on a large
audit set (ArguAna's long questions on a busy machine), and a restart meanwhile left it
holding a connection the server had closed; its first store call after the audit set was
read then failed ("lost the feedback store ... terminating connection due to
administrator command") and ``tttembed loop`` exited, so the soak's learner never paid a
pair. A store that is lost at start-up is waited for, as in the loop's steps."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.test_loop_promises import Counting
from tests.loop.test_loop import QUERIES, TASK, world  # noqa: F401
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")
pytest.importorskip("psycopg")


def test_a_learner_starts_across_a_postgresql_restart(world, tmp_path, monkeypatch):  # noqa: F811
    from tests.pg import postgres_instance
    from tttembed.loop.auditor import Auditor
    from tttembed.loop.config import LoopConfig
    from tttembed.loop.open import open_store
    from tttembed.loop.run import Loop
    from tttembed.loop.store import SearchLog

    prepare = Auditor.prepare
    with postgres_instance(tmp_path) as db:
        def prepare_then_restart(self: Any) -> Any:  # the restart during the start-up
            got = prepare(self)
            db.restart("fast")
            return got

        monkeypatch.setattr(Auditor, "prepare", prepare_then_restart)
        judge = Counting(world["relevant"])
        with LocalOpenAIServer(rerank=judge) as server:
            loop = Loop(LoopConfig(registry=db.url, index=str(world["root"] / "index"),
                                   judge=f"rerank:test@{server.url}",
                                   corpus=str(world["corpus"]), judge_rpm=60_000,
                                   judge_budget=40, learn_every=10_000, min_queries=2))
            try:
                store = open_store(db.url)
                store.log_searches([SearchLog(f"s{i}", TASK, q, float(i + 1), None,
                                              tuple(world["raw"][q][:10]))
                                    for i, q in enumerate(QUERIES)])
                store.close()
                for _ in range(20):
                    loop.step()
                    if loop.spent() > 0:
                        break
                assert judge.pairs > 0 and loop.spent() == judge.pairs, \
                    (judge.pairs, loop.spent())
            finally:
                loop.close()
