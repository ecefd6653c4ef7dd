"""One learning cycle (:class:`tttembed.loop.learner.Learner`) on exact vectors: the tasks
of ``tests/ttt/test_guard`` (a table embedder, a FAISS index of chosen unit vectors) and
a judge that scores by the questions' labels. A version holds only the parts that
``--scope`` (``LoopConfig.scopes``) allows, and the parts it excludes are neither learned
nor paid for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.ttt.test_guard import _task
from tttembed.loop.config import LoopConfig
from tttembed.loop.judge import BackgroundJudge
from tttembed.loop.learner import Learner
from tttembed.loop.open import open_store
from tttembed.registry.versions import Registry, index_record

QUERY_LEVEL = {"query", "rw-rocchio", "qdrant-rf"}


class LabelScorer:
    """The questions' labels, by query text: 1 for a relevant document, else 0."""

    spec = identity = "test:labels"
    mapping = "label"

    def __init__(self, relevant: dict[str, set[str]]) -> None:
        self.relevant = relevant

    def score(self, query: Any, items: Any, progress: Any = None) -> np.ndarray:
        rel = self.relevant.get(query.text, set())
        return np.array([1.0 if it.id in rel else 0.0 for it in items])


def _learner(tmp_path: Path, kind: str, tasks: list[str], budget: int,
             **config: Any) -> Learner:
    """A learner whose store holds the judge's rewards of each question's top ``budget``
    raw candidates, the questions asked in ``tasks`` in turn."""
    from tttembed.loop.promote import adapted, top_lists

    index, emb, docs, queries, qrels = _task(tmp_path, kind)
    texts = [queries[q] for q in queries]
    relevant = {queries[q]: set(qrels[q]) for q in queries}
    reg = tmp_path / "reg"
    cfg = LoopConfig(registry=str(reg), index=str(index.path), judge="test:labels",
                     validate_share=1.0, **config)
    store = open_store(None, Registry(reg, create=True, index=index_record(index)).root)
    judge = BackgroundJudge(LabelScorer(relevant), docs, store)
    names = [tasks[i % len(tasks)] for i in range(len(texts))]
    lists = top_lists(index, adapted(emb.encode(texts, "query"), texts, names, []), budget)
    judge.pay([(t, q, d) for t, q, lst in zip(names, texts, lists) for d in lst])
    return Learner(cfg, Registry(reg), store, index, emb, judge)


def _cycle(learner: Learner) -> tuple[Any, dict[str, Any]]:
    cycle = learner.cycle(10_000, frozen=False)
    assert cycle.version is not None
    state = cycle.version.load()
    return state, state.selection


@pytest.mark.parametrize(("kind", "scopes", "budget"), [("helpful", ("query",), 3),
                                                        ("harmful", ("task",), 10)])
def test_a_cycle_keeps_only_the_parts_its_scopes_allow(tmp_path, kind, scopes, budget):
    """``helpful``: the task-wise vector gains (the default keeps it) but ``--scope query``
    leaves it out; ``harmful``: the query part gains (the default keeps it) but ``--scope
    task`` leaves it out. The excluded part is not measured (no evidence, no pair)."""
    state, sel = _cycle(_learner(tmp_path, kind, ["t"], budget, scopes=scopes))
    if "task" not in scopes:
        assert "t" not in state.keys and sel["shared"] == {"t": "raw"}
        assert not {"task", "global"} & set(sel["evidence"]["t"])
    if "query" not in scopes:
        assert sel["query"] == {"t": "none"} and not any("/#" in k for k in state.keys)
        assert not QUERY_LEVEL & set(sel["evidence"]["t"])


def test_the_default_cycle_keeps_the_part_a_scope_would_exclude(tmp_path):
    """The control of the test above: with every part allowed the helpful task keeps its
    task-wise vector."""
    state, sel = _cycle(_learner(tmp_path, "helpful", ["t"], 3,
                                 scopes=("global", "task", "query")))
    assert sel["shared"] == {"t": "task"} and "t" in state.keys


def test_with_several_tasks_the_loops_default_scopes_leave_global_out(tmp_path):
    """Two tasks and the loop's default ``query,task``: no global state is learned or
    validated (it was before: the user's scopes never reached the selection)."""
    learner = _learner(tmp_path, "helpful", ["a", "b"], 3)
    assert learner.config.scopes == ("query", "task")
    state, sel = _cycle(learner)
    assert all("global" not in e for e in sel["evidence"].values())
    assert "*" not in state.keys and set(sel["shared"].values()) <= {"raw", "task"}


def test_a_cycle_encodes_and_searches_only_the_texts_no_earlier_cycle_saw(tmp_path):
    """Bounded cycles (issue 62): the base retrieval of a rewarded text is computed once
    and kept (at most BASE_CACHE texts), so a second cycle over the same rewards encodes
    nothing; past the cap the least recently used text is dropped."""
    import tttembed.loop.learner as learner_mod

    learner = _learner(tmp_path, "helpful", ["t"], 3)
    calls: list[int] = []
    encode = learner.embedder.encode

    def counting(texts, kind="query"):
        calls.append(len(texts))
        return encode(texts, kind)

    learner.embedder.encode = counting  # type: ignore[method-assign]
    learner.cycle(10_000, frozen=False)
    first = sum(calls)
    assert first > 0 and len(learner._bases) == first
    calls.clear()
    learner.cycle(10_000, frozen=False)
    assert sum(calls) == 0, calls
    old = learner_mod.BASE_CACHE
    try:
        learner_mod.BASE_CACHE = 5
        learner.cycle(10_000, frozen=False)
        assert len(learner._bases) == 5
    finally:
        learner_mod.BASE_CACHE = old


def test_a_recurring_failure_is_logged_once_per_kind_until_it_works(caplog):
    """The learner's heartbeat during a database restart: one warning per kind of
    failure, not one a second, and one line when it works again."""
    import logging

    from tttembed.loop.failures import OncePerKind

    said = OncePerKind("heartbeat not written")
    with caplog.at_level(logging.INFO, logger="tttembed.loop"):
        for _ in range(5):
            said.failed(OSError("connection refused"))
        said.failed(OSError("timeout"))
        said.ok()
        said.ok()
        said.failed(OSError("connection refused"))
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0] for line in lines] == ["heartbeat not written"] * 4
    assert sum("connection refused" in line for line in lines) == 2
    assert sum(line.endswith("the failure has stopped") for line in lines) == 1


def test_the_heartbeat_through_a_database_restart_says_each_kind_once(caplog, monkeypatch):
    """The learner's own heartbeat thread (``Loop._heartbeat``) through a restart of its
    registry's database: 30 failed beats of two kinds are two warnings (not one a beat),
    and one line when a beat is written again."""
    import logging
    import threading
    from types import SimpleNamespace

    import tttembed.loop.run as run

    failures = iter([OSError("the database system is shutting down")] * 10
                    + [OSError("connection refused")] * 20)
    stop, written = threading.Event(), []

    def beat(_coordination):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        written.append(1)
        if len(written) >= 5:
            stop.set()

    monkeypatch.setattr(run, "beat", beat)
    monkeypatch.setattr(run, "HEARTBEAT_S", 0.001)
    loop = SimpleNamespace(stop=stop, coordination=None, lost=None)
    with caplog.at_level(logging.INFO, logger="tttembed.loop"):
        run.Loop._heartbeat(loop)  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records if r.name == "tttembed.loop"]
    warned = [line for line in lines if "(said once until it works again)" in line]
    assert len(warned) == 2, lines
    assert sum(line.endswith("the failure has stopped") for line in lines) == 1, lines


def test_a_cycle_with_more_texts_than_the_window_learns_from_at_most_the_window(
        tmp_path, monkeypatch):
    """Bounded learning cycles: the first cycle learns from all 40 rewarded texts (under
    the window) and is served; with a window of 8 the next one's query part and asked
    check see 8 texts, and the 32 outside the window keep the served version's
    query-wise vectors (every one the served version holds is in the registered
    version). Its shared part is learned from the shared set (all 40: under
    ``SHARED_TEXTS``), with the shared scopes only, and the new questions' check runs
    on those 40."""
    import tttembed.ttt.distil as distil
    from tttembed.adapt.scopes import query_key

    learner = _learner(tmp_path, "harmful", ["t"], 10, scopes=("query", "task"))
    calls: list[tuple[int, tuple[str, ...], set[str]]] = []
    learn_auto = distil.learn_auto

    def counting(sources, *args, **kwargs):
        calls.append((sum(len(qs) for qs, _, _ in sources), tuple(kwargs["scopes"]),
                      {query_key(t, q) for qs, _, _ in sources
                       for t, q in zip(qs.tasks, qs.texts)}))
        return learn_auto(sources, *args, **kwargs)

    monkeypatch.setattr(distil, "learn_auto", counting)
    first = learner.cycle(10_000, frozen=False)
    assert [c[:2] for c in calls] == [(40, ("query", "task"))] and first.version is not None
    assert first.version.manifest["shared_set"] == 40
    learner.registry.promote(first.version.name, by="test", reason="the served version")
    learner.recent.window = 8
    second = learner.cycle(10_000, frozen=False)
    assert [c[:2] for c in calls[1:]] == [(8, ("query", "task")), (40, ("task",))], calls
    inside = calls[1][2]
    assert second.version is not None and second.version.manifest["outside_window"] == 32
    assert second.version.manifest["shared_set"] == 40
    assert second.version.manifest["evidence"]["populations"]["new"]["queries"] == 40
    served = {k for k in first.version.load().keys if "/#" in k}
    assert served - inside and served - inside <= set(second.version.load().keys)


def test_the_state_learner_leaves_the_chain_learners_rewards_out(tmp_path):
    """A store the chain learner pays into too (``serve --learn --chain``): its rewards,
    under the task ``/chain`` (no task name holds a '/'), teach no state; read as a
    state's, they failed every state cycle (bad task name '/chain')."""
    from tttembed.loop.rewarded import collect, judge_rewards
    from tttembed.loop.rows import CHAIN_TASK
    from tttembed.loop.store import Reward

    store = open_store(str(tmp_path / "loop.sqlite"))
    try:
        store.add_rewards([Reward("t", "a query", "d1", 1.0, 1.0, "judge", paid=1),
                           Reward(CHAIN_TASK, "a question", "d2", 1.0, 1.0, "judge", paid=1)])
        assert judge_rewards(store) == {("t", "a query", "d1"): 1.0}
        rewards, judged, _, _ = collect(store)
        assert rewards == {("t", "a query"): {"d1": 1.0}} and judged == 1
    finally:
        store.close()
