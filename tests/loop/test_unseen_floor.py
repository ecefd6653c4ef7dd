"""The no-judge loop's unseen floor: a document nobody was shown is worth what the
documents shown only at the tail of the list earned, in the rewards' own units, so a
candidate that brings up new documents is weighed alike under debiased and naive click
rewards (a flat 0 penalised it about ten times more under the debiased ones)."""

from __future__ import annotations

import numpy as np

from tests.loop.clicks.conftest import Tiny
from tttembed.loop.clicks import simulate as sim
from tttembed.loop.clicks.feed import unseen_floors
from tttembed.loop.clicks.propensity import estimate, flat
from tttembed.loop.clicks.rewards import click_rewards, click_stats
from tttembed.loop.nojudge import UNSEEN_REWARD, UnseenAtFloor, key_floors
from tttembed.loop.rows import Shown


def _shown(task: str, query: str, doc: str, rank: int, clicked: bool, i: int) -> Shown:
    return Shown(f"s{i}", task, query, doc, rank, clicked, "raw", f"u{i}")


def test_the_floor_is_the_mean_reward_of_pairs_shown_only_at_the_tail() -> None:
    rows = []
    for i in range(40):
        rows.append(_shown("t", "q", "tail-a", 9, i % 4 == 0, i))   # 10 of 40
        rows.append(_shown("t", "q", "tail-b", 10, i % 8 == 0, i))  # 5 of 40
        rows.append(_shown("t", "q", "top", 1, i % 2 == 0, i))
        # shown at rank 9 and rank 2: not a tail-only document
        rows.append(_shown("t", "q", "mixed", 9 if i % 2 else 2, True, i))
        rows.append(_shown("u", "q", "other", 8, False, i))
    stats = click_stats(rows, flat(10))
    reward = {(s.task, s.doc_id): s.reward for s in stats}
    floors = unseen_floors(rows, stats, 10)
    assert floors["t"] == np.mean([reward[("t", "tail-a")], reward[("t", "tail-b")]])
    assert floors["u"] == reward[("u", "other")]
    # the mixed document's clicks do not move the floor
    moved = [r if r.doc_id != "mixed" else _shown("t", "q", "mixed", r.rank, False, 0)
             for r in rows]
    stats2 = click_stats(moved, flat(10))
    tail = {(s.task, s.doc_id): s.reward for s in stats2}
    assert unseen_floors(moved, stats2, 10)["t"] == np.mean(
        [tail[("t", "tail-a")], tail[("t", "tail-b")]])
    assert unseen_floors(rows, stats, 10, tail=0) == {}


def test_unseen_at_floor_pays_nothing_and_prices_by_the_query_task() -> None:
    floors = key_floors(["k1", "k2", "k3"], ["a", "b", "c"], {"a": 0.12, "b": 0.03})
    assert floors == {"k1": 0.12, "k2": 0.03}
    pay = UnseenAtFloor(floors)
    got = pay([("k1", "d1"), ("k2", "d2"), ("k3", "d3")])
    assert got == {"k1": {"d1": 0.12}, "k2": {"d2": 0.03}, "k3": {"d3": UNSEEN_REWARD}}
    assert pay.asked == 3 and pay.spent == 0 and pay.bought == got


def _irrelevant_top_reward(shown: list[Shown], stats: list, tiny: Tiny) -> float:
    """Mean reward of irrelevant documents shown at ranks 1-3 (well examined)."""
    best: dict[tuple[str, str], int] = {}
    for s in shown:
        best[(s.query, s.doc_id)] = min(best.get((s.query, s.doc_id), s.rank), s.rank)
    text_to_q = {t: q for q, t in tiny.queries.items()}
    vals = [s.reward for s in stats if best[(s.query, s.doc_id)] <= 3
            and tiny.qrels[text_to_q[s.query]][s.doc_id] == 0]
    return float(np.mean(vals))


def test_the_floor_puts_unseen_documents_level_with_shown_irrelevant_ones() -> None:
    """Under both debiased and naive rewards, an unseen document is priced within a
    factor 3 of an irrelevant document users saw near the top; a flat 0 is not."""
    tiny = Tiny(queries=60, seed=3)
    traffic = tiny.traffic({"v1": tiny.ranker(1), "v2": tiny.ranker(2), "v3": tiny.ranker(3)})
    users = sim.Population({"pbm": sim.PositionBased(eta=1.0, noise=0.1, top=2.0)},
                           {"pbm": 1.0}, sessions=5000)
    shown = sim.simulate(traffic, users, 8000, np.random.default_rng(0))
    prop = estimate(shown, 10, resamples=5)
    floors = {}
    for naive in (False, True):
        got = click_rewards(shown, prop, naive=naive)
        floor = floors[naive] = unseen_floors(list(got.cleaned), list(got.stats), 10)["task"]
        irrelevant = _irrelevant_top_reward(list(got.cleaned), list(got.stats), tiny)
        assert irrelevant / 3 < floor < 3 * irrelevant, (naive, floor, irrelevant)
    assert floors[False] > 2 * floors[True]  # the floor follows the rewards' units


def test_with_a_judge_and_clicks_the_shared_parts_are_valued_at_the_floor():
    """Issue 62: with a judge and click rewards the shared parts' held-out lists and the
    new-questions check value new documents at the task's unseen floor (the clicks'
    scale); the new check is free of the judge's cap only when every query has a floor;
    without a judge or without clicks nothing changes."""
    from types import SimpleNamespace

    from tttembed.loop.clicks.feed import ClickView
    from tttembed.loop.clicks.propensity import flat
    from tttembed.loop.learner import UNLIMITED, Learner
    from tttembed.loop.nojudge import FloorOrPay
    from tttembed.ttt.queries import QuerySet

    def learner(judge: bool) -> Learner:
        return Learner(SimpleNamespace(has_judge=judge), None, None, None, None, None)  # type: ignore[arg-type]

    view = ClickView({}, (), flat(10), (), floors={"t": 0.08})
    one = QuerySet(("t", "t"), ("a", "b"), ("q a", "q b"))
    two = QuerySet(("t", "u"), ("a", "b"), ("q a", "q b"))
    judge = lambda pairs: {k: {d: 1.0} for k, d in pairs}  # noqa: E731
    got, cap = learner(True)._shared_pay(one, view, judge)  # type: ignore[arg-type]
    assert isinstance(got, FloorOrPay) and cap == UNLIMITED
    assert got([(one.keys[0], "d")]) == {one.keys[0]: {"d": 0.08}}
    got, cap = learner(True)._shared_pay(two, view, judge)  # type: ignore[arg-type]
    assert isinstance(got, FloorOrPay) and cap is None  # task u is paid by the judge
    assert got([(two.keys[1], "d")]) == {two.keys[1]: {"d": 1.0}}
    assert learner(False)._shared_pay(one, view, judge) == (None, None)  # type: ignore[arg-type]
    assert learner(True)._shared_pay(one, None, judge) == (None, None)  # type: ignore[arg-type]
