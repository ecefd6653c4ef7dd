"""Click-through by rank counts per impression: a search shown to several sessions is one
impression per session that acted on it (one when none did), and a rank's clicks are the
impressions clicked there, so the rate never exceeds 1 (34 clicks / 31 impressions at
rank 1 when several sessions clicked one search)."""

from __future__ import annotations

import time

from tttembed.loop.open import open_store
from tttembed.loop.rows import ClickCaps, Event, SearchLog


def test_several_sessions_clicking_one_search_keep_ctr_at_most_one(tmp_path) -> None:
    store = open_store(str(tmp_path / "loop.sqlite"))
    now = time.time()
    ids = ("d1", "d2", "d3")
    store.log_searches([SearchLog(f"s{i}", "t", f"q{i}", now + i, None, ids)
                        for i in range(3)])
    # s0: four sessions click rank 1; s1: nobody acts; s2: one session clicks rank 2
    events = [Event("s0", "d1", "click", f"user-{u}", f"user-{u}", "t", "q0", 1)
              for u in range(4)]
    events.append(Event("s2", "d2", "click", "user-9", "user-9", "t", "q2", 2))
    assert store.add_events(events, caps=ClickCaps()).stored == 5
    by_rank = {r.rank: r for r in store.click_counts_by_rank(3)}
    assert all(r.ctr is None or r.ctr <= 1 for r in by_rank.values())
    # impressions: s0 once per its 4 sessions, s1 once, s2 once for its one session
    assert (by_rank[1].impressions, by_rank[1].clicks) == (6, 4)
    assert (by_rank[2].impressions, by_rank[2].clicks) == (6, 1)
    assert by_rank[3].impressions == 6 and by_rank[3].clicks == 0
    store.close()
