"""``/v1/loop`` says what clicks wait to settle: ``idle`` means the judge and the learner
have nothing to do now, and ``clicks_waiting`` counts the searches whose clicks the
learner has not read yet (served less than ``--click-settle-s`` ago) and when the next
one settles."""

from __future__ import annotations

import time

import pytest

from tttembed.loop.open import open_store
from tttembed.loop.rows import SearchLog
from tttembed.loop.status import LoopState, beat, loop_status, write_status
from tttembed.registry.versions import Registry


def test_searches_waiting_to_settle_are_counted_with_the_next_settle_time(tmp_path) -> None:
    reg = Registry(tmp_path / "reg", create=True)
    store = open_store(None, reg.root)
    now = time.time()
    store.log_searches([SearchLog("old", "t", "q0", now - 400, None, ("d1",)),
                        SearchLog("s1", "t", "q1", now - 100, None, ("d1",)),
                        SearchLog("s2", "t", "q2", now - 10, None, ("d1",)),
                        SearchLog("e1", "t", "q3", now - 5, None, (), "embeddings")])
    write_status(reg.root, LoopState(idle=True, pid=0, click_settle_s=300.0))
    beat(reg.root)
    status = loop_status(reg, store)
    assert status["idle"] is True  # nothing to judge or learn now ...
    waiting = status["clicks_waiting"]  # ... but two searches' clicks are still to come
    assert waiting["searches"] == 2 and waiting["settle_s"] == 300.0
    assert waiting["next_settles_in_s"] == pytest.approx(200, abs=5)
    assert waiting["next_settles_at"] == pytest.approx(now + 200, abs=5)

    write_status(reg.root, LoopState(idle=True, click_settle_s=-1.0))  # --clicks off
    assert loop_status(reg, store)["clicks_waiting"] is None
    store.close()
