"""The closed loop on clicks alone (``--judge none``): users of the test world click by a
position-based model (rank r examined with probability 1/r, the relevant document
clicked when examined 90% of the time, any other 5%); the learner reads the settled
searches and their clicks from the store, debiases them, learns and promotes a version
that serves the relevant documents higher, paying nothing. With ``--interleave`` the
version becomes a candidate instead of being promoted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.loop.test_loop import QUERIES, TASK, _ndcg_served, world  # noqa: F401

pytest.importorskip("sentence_transformers")


def _clicky_traffic(store: Any, world: dict[str, Any], searches: int, seed: int,  # noqa: F811
                    bots: float = 0.0) -> int:
    """``searches`` of the world's queries with people clicking by the module's model;
    a share ``bots`` of them by four bot sessions instead, clicking one result uniformly
    at random (half of them) or always the first."""
    from tttembed.loop.rows import Event, SearchLog

    rng = np.random.default_rng(seed)
    now = time.time() - 10.0
    rows, events = [], []
    for i in range(searches):
        q = QUERIES[i % len(QUERIES)]
        ids = tuple(world["raw"][q][:10])
        sid = f"c{seed}-{i}"
        rows.append(SearchLog(sid, TASK, q, now + 1e-4 * i, None, ids))
        if rng.random() < bots:
            bot = int(rng.integers(4))
            r = 1 if bot < 2 else int(rng.integers(1, 11))
            events.append(Event(sid, ids[r - 1], "click", f"bot-{bot}", task=TASK, query=q,
                                rank=r))
            continue
        for r, d in enumerate(ids, 1):
            gamma = 0.9 if d == world["relevant"][q] else 0.05
            if rng.random() < gamma / r:
                events.append(Event(sid, d, "click", f"u{seed}-{i}", task=TASK, query=q,
                                    rank=r))
    store.log_searches(rows)
    store.add_events(events)
    return len(events)


def _loop(world: dict[str, Any], tmp_path: Path, **kw: Any) -> Any:  # noqa: F811
    from tttembed.loop.config import LoopConfig
    from tttembed.loop.run import Loop

    config = LoopConfig(registry=str(tmp_path / "reg"), index=str(world["root"] / "index"),
                        judge="none", corpus=str(world["corpus"]), min_queries=2,
                        click_settle_s=1.0, learn_every=50, **kw)
    return Loop(config)


def test_clicks_alone_promote_a_better_version_and_pay_nothing(world, tmp_path,  # noqa: F811
                                                               monkeypatch):
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    loop = _loop(world, tmp_path)
    assert loop.config.judge_budget == 0
    before = _ndcg_served(world, loop)
    # 2,400 searches: without a judge the promotion check judges the candidate on the
    # clicks of the 1 session in 5 held out of its learning (issue 62), not on 800
    clicks = _clicky_traffic(loop.store, world, 2400, 0)
    for _ in range(5):
        loop.step()
        if loop.registry.served():
            break
    served = loop.registry.served()
    assert served is not None, [v.manifest["reason"] for v in loop.registry.versions()]
    v = loop.registry.get(served)
    assert v.manifest["pairs"]["clicks"] > 0 and v.manifest["pairs"]["judged"] == 0
    assert _ndcg_served(world, loop) > before + 0.1
    assert loop.store.spent() == {} or sum(loop.store.spent().values()) == 0
    status = loop.state.clicks
    assert status["mode"] == "ips" and status["read"] == clicks
    assert status["propensities"]["theta"][0] == 1.0
    # what a document nobody was shown was worth in the checks, per task (/v1/loop)
    floors = status["unseen_floor"]
    assert floors and all(0.0 < f < 1.0 for f in floors.values()), floors
    loop.close()


def test_bot_traffic_does_not_get_a_harmful_version_promoted(world, tmp_path,  # noqa: F811
                                                             monkeypatch):
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    loop = _loop(world, tmp_path)
    before = _ndcg_served(world, loop)
    _clicky_traffic(loop.store, world, 1600, 3, bots=0.1)  # each bot ~40 clicks
    for _ in range(3):
        loop.step()
    assert _ndcg_served(world, loop) >= before  # raw kept, or a version that helps
    view = loop.learner.last_clicks
    assert view is not None and set(view.dropped_sessions) == {f"bot-{i}" for i in range(4)}
    loop.close()


def test_with_interleaving_the_version_waits_as_the_candidate(world, tmp_path,  # noqa: F811
                                                             monkeypatch):
    from tttembed.loop.coordination.folder import read_candidate

    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    loop = _loop(world, tmp_path, interleave=0.5)
    _clicky_traffic(loop.store, world, 800, 1)
    for _ in range(5):
        loop.step()
        if read_candidate(loop.registry.root):
            break
    record = read_candidate(loop.registry.root)
    assert record is not None and loop.registry.served() is None
    assert loop.registry.get(record["version"]).manifest["reason"].startswith("candidate:")
    loop.step()  # no interleaved search yet: the test waits, no new version is learned
    assert len(loop.registry.versions()) == 1
    assert loop.state.online["decision"] == "undecided"
    loop.close()


def test_judge_none_refuses_an_audit(world, tmp_path) -> None:  # noqa: F811
    from tttembed.core.errors import ConfigError
    from tttembed.loop.config import LoopConfig

    with pytest.raises(ConfigError, match="--judge none"):
        LoopConfig(registry=str(tmp_path / "r"), index="i", judge="none", audit="qrels:x")
