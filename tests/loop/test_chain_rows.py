"""The chain learner's reading of stored chain searches: what cannot be rebuilt (a search
logged before the hops were recorded, a list shorter than its chain, a chain passage that
left the index) is skipped and counted, never a failure; held-out questions and judged
pairs are not judged again."""

from __future__ import annotations

from tttembed.loop.chain.rows import held_out, pending, read_traffic, relevant_rows
from tttembed.loop.rows import CHAIN_TASK, SearchLog

ROWS = {"p1": 0, "p2": 1, "p3": 2}


def _store(tmp_path, logs):
    from tttembed.loop.open import open_store

    store = open_store(str(tmp_path / "loop.sqlite"))
    store.log_searches(logs)
    return store


def test_what_cannot_be_rebuilt_is_skipped_and_counted(tmp_path):
    store = _store(tmp_path, [
        SearchLog("a", CHAIN_TASK, "q1", 1.0, "v1", ("p1", "p2", "p3"), "chain:2:128"),
        SearchLog("b", CHAIN_TASK, "q2", 2.0, None, ("p1", "p2"), "chain"),  # logged before
        SearchLog("c", CHAIN_TASK, "q3", 3.0, None, ("gone", "p2"), "chain:2:256"),
        SearchLog("d", CHAIN_TASK, "q4", 4.0, None, ("p1",), "chain:2:256"),
        SearchLog("e", "docs", "q5", 5.0, None, ("p1",), "search")])
    try:
        got = read_traffic(store, ROWS)
    finally:
        store.close()
    [only] = got.searches
    assert (only.search_id, only.rows, only.max_seq_length, only.version) == \
        ("a", [0, 1], 128, "v1")
    assert dict(got.skipped) == {"no hop count (logged before it was recorded)": 1,
                                 "a chain passage left the index": 1,
                                 "list shorter than its chain": 1}


def test_pending_skips_held_out_questions_and_judged_pairs(tmp_path):
    texts = [f"question number {i}?" for i in range(40)]
    held = [q for q in texts if held_out(q)]
    kept = [q for q in texts if not held_out(q)]
    assert held and kept
    logs = [SearchLog(f"s{i}", CHAIN_TASK, q, float(i), None, ("p1", "p2", "p3"),
                      "chain:2:256") for i, q in enumerate(texts)]
    store = _store(tmp_path, logs)
    try:
        searches = read_traffic(store, ROWS).searches
    finally:
        store.close()
    judged = {(CHAIN_TASK, kept[0], "p1"): 1.0}
    todo = pending(searches, judged, depth=2)
    assert {q for _, q, _ in todo} == set(kept)
    assert (CHAIN_TASK, kept[0], "p1") not in todo and {d for *_, d in todo} == {"p1", "p2"}
    assert [d for *_, d in todo[:len(kept) - 1]] == ["p1"] * (len(kept) - 1)  # top rank first


def test_relevant_rows_follow_the_served_rank_and_labels_win():
    from tttembed.loop.chain.rows import Served

    searches = [Served("a", "q", None, [2, 0], ("p3", "p1", "p2"), 256)]
    judged = {(CHAIN_TASK, "q", "p1"): 0.9, (CHAIN_TASK, "q", "p3"): 0.8,
              (CHAIN_TASK, "q", "p2"): 0.9}
    people = {("q", "p2"): 0.0}                    # a person says p2 is not relevant
    assert relevant_rows(["q"], searches, judged, people, ROWS) == {"q": [2, 0]}
    assert relevant_rows(["other"], searches, judged, people, ROWS) == {}


def test_a_min_queries_the_budget_cannot_reach_is_said_in_one_line():
    from tttembed.cli.loop import loop_config
    from tttembed.loop.chain.run import unreachable

    never = unreachable(loop_config("reg", "idx", "bm25", judge_budget=50, min_queries=20))
    assert "\n" not in never and "--min-queries 20 cannot be reached" in never
    assert "--judge-budget 50 (10 pairs" in never and "raise --judge-budget" in never
    assert unreachable(loop_config("reg", "idx", "bm25", judge_budget=100,
                                   min_queries=20)) == ""
