"""Silent faults of issue 49, section 5 (states and inputs): a stale or garbage
candidate, a diff across kinds of state, a NaN in the evaluation cache, a qrels file
linked to itself, and a rank above the embedder's dimension. Each is now said in one
line that names the thing and the fix."""

from __future__ import annotations

import re

import pytest

from tests.pg import database_fixtures
from tttembed.core.errors import ConfigError

pg_cluster, url = database_fixtures("si_")


def test_a_rank_above_the_embedders_dimension_is_refused_before_any_pair_is_paid(tmp_path):
    """``--rank 1000`` on a 16-dimension embedder is refused (one rule: rank <= the
    embedder's dimension), naming both numbers, before the judge is asked anything."""
    import tttembed.api as tt
    from tests.ttt.test_guard import D, _task
    from tttembed.score.qrels import QrelsScorer

    index, emb, docs, queries, qrels = _task(tmp_path, "helpful")
    asked: list[int] = []

    class Counting(QrelsScorer):
        def score(self, query, docs):  # type: ignore[override]
            asked.append(len(docs))
            return super().score(query, docs)

    with pytest.raises(ConfigError, match=re.escape(f"--rank 1000 is above the embedder's "
                                                    f"dimension {D}")):
        tt.learn(index, queries, scorer=Counting("labels", qrels=qrels), task="t",
                 embedder=emb, corpus=docs, budget=3, scope="adapter", rank=1000)
    assert asked == []
    state = tt.learn(index, queries, scorer=QrelsScorer("labels", qrels=qrels), task="t",
                     embedder=emb, corpus=docs, budget=3, scope="adapter", rank=D)
    assert state.parts.rank == D  # the dimension itself is allowed


def test_a_nan_in_a_cached_evaluation_cell_names_the_file_and_the_fix(tmp_path):
    """A per-query NaN in ``<cache>/eval/cells/KEY.json`` is refused on the way out of the
    cache with the file's path and the fix (delete it: the next run recomputes it), never
    as an anonymous "paired scores contain NaN" later."""
    import json

    from tttembed.core.errors import DataError
    from tttembed.evaluation.runner import CELL_METRICS, CellCache

    cache = CellCache(tmp_path, {"k": 1})
    good = {m: {"t/q1": 0.5, "t/q2": 0.25} for m in CELL_METRICS}
    assert cache({"cell": 1}, lambda: good) == good
    (path,) = tmp_path.glob("*.json")
    bad = {m: dict(v) for m, v in good.items()}
    bad[CELL_METRICS[0]]["t/q2"] = float("nan")
    path.write_text(json.dumps(bad))
    with pytest.raises(DataError) as got:
        CellCache(tmp_path, {"k": 1})({"cell": 1}, lambda: good)
    text = str(got.value)
    assert str(path) in text and "t/q2" in text and "delete" in text


def test_a_qrels_file_linked_to_itself_is_said_so(tmp_path):
    """``qrels/test.tsv`` a link to itself (a loop of links) is named as such, not as "no
    judgments for split 'test' (available splits: test)"."""
    from tttembed.core.errors import DataError
    from tttembed.data.beir import load_task

    root = tmp_path / "task"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a doc"}\n')
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    (root / "qrels" / "test.tsv").symlink_to("test.tsv")
    with pytest.raises(DataError) as got:
        load_task(root, split="test")
    text = str(got.value)
    assert "loop of links" in text and "test.tsv" in text
    assert "available splits" not in text


def _task_state(keys, seed=0, dim=4):
    import numpy as np

    from tttembed.adapt.state import AdaptState

    v = np.random.default_rng(seed).normal(size=(len(keys), dim)).astype(np.float32)
    return AdaptState("task", tuple(keys), v, np.full(len(keys), 0.5),
                      np.ones(len(keys), np.int64), identity="st:test", dim=dim)


def _adapter_state(keys, seed=1, dim=4, rank=2):
    import dataclasses

    import numpy as np

    from tttembed.adapt.parts import StateParts

    base = _task_state(keys, seed, dim)
    rng = np.random.default_rng(seed + 10)
    u = rng.normal(size=(len(keys), dim, rank)).astype(np.float32)
    v = rng.normal(size=(len(keys), dim, rank)).astype(np.float32)
    return dataclasses.replace(base, scope="adapter",
                               parts=StateParts(np.arange(len(keys)), u, v))


def test_states_diff_across_a_task_and_an_adapter_version_compares_the_vectors(tmp_path):
    """``states diff`` between a task version and an adapter version compares what both
    have (the task vectors and alphas: a finite |delta| and cosine) and says what it
    cannot (the adapter's map, present on one side only), never ``|delta| inf cosine
    nan``."""
    import math

    from typer.testing import CliRunner

    from tttembed.cli import app
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "r", create=True, index={"identity": "st:test"})
    reg.register(_task_state(("a", "b")))
    reg.register(_adapter_state(("a", "b")))
    d = reg.diff("v1", "v2")
    assert d["changed"] == ["a", "b"]
    for c in d["changes"].values():
        assert math.isfinite(c["delta_norm"]) and math.isfinite(c["cosine"])
        assert c["map"] == "added"
    assert "map" in d["not_compared"] and "v2" in d["not_compared"]
    out = CliRunner().invoke(app, ["states", "diff", str(tmp_path / "r"), "v1", "v2"])
    assert out.exit_code == 0, out.output
    assert "inf" not in out.output and "nan" not in out.output
    assert "map added" in out.output and "not compared" in out.output


@pytest.mark.parametrize("text, said", [
    ('{"version": "v99", "against": null, "since": "2026-01-01T00:00:00Z", "by": "learner"}',
     "v99"),
    ("{not json", "candidate.json"),
])
def test_a_stale_or_garbage_candidate_is_reported_not_shown(tmp_path, text, said):
    """A ``candidate.json`` that names a version the registry does not hold, or cannot be
    read, is reported by ``states list`` (and its exit) and by ``/v1/loop``
    (``candidate_error``), which shows no candidate: one rule for both readers."""
    from typer.testing import CliRunner

    from tttembed.cli import app
    from tttembed.loop.status import loop_status
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "r", create=True, index={"identity": "st:test"})
    reg.register(_task_state(("a",)))
    (tmp_path / "r" / "candidate.json").write_text(text)
    status = loop_status(reg, None)
    assert status["candidate"] is None
    assert said in status["candidate_error"]
    out = CliRunner().invoke(app, ["states", "list", str(tmp_path / "r")])
    assert out.exit_code == 1, out.output
    assert "candidate" in out.output and said in out.output
    got = CliRunner().invoke(app, ["states", "list", str(tmp_path / "r"), "--json"])
    assert said in got.output and '"candidate": null' in got.output


def test_the_learner_drops_a_candidate_that_names_no_version(tmp_path):
    """The learner's online test reads the candidate by the same rule: one naming a
    version the registry does not hold is dropped (cleared), never tested for ever."""
    from tttembed.loop.clicks.feed import ClickFeed
    from tttembed.loop.coordination.folder import set_candidate
    from tttembed.loop.online import OnlineTest
    from tttembed.loop.open import open_store
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "r", create=True, index={"identity": "st:test"})
    reg.register(_task_state(("a",)))
    set_candidate(reg.root, "v99", None)
    store = open_store(str(tmp_path / "loop.sqlite"))
    try:
        online = OnlineTest(reg, ClickFeed(store, settle_s=0.0))
        assert online.step() is None
        assert not (tmp_path / "r" / "candidate.json").exists()
        assert "v99" in online.dropped
    finally:
        store.close()


def test_db_candidate_naming_no_version(url, tmp_path):
    """The same rule on a PostgreSQL registry: a candidate row naming v99 is reported in
    ``/v1/loop`` (``candidate_error``), never shown as the candidate."""
    pytest.importorskip("psycopg", reason="pip install 'tttembed[loop]'")
    from tttembed.loop.coordination import open_coordination
    from tttembed.loop.status import loop_status
    from tttembed.registry.open import open_registry

    reg = open_registry(url, create=True, index={"identity": "st:test"}, cache=tmp_path / "c")
    try:
        reg.register(_task_state(("a",)))
        open_coordination(reg).set_candidate("v99", None)
        status = loop_status(reg, None)
        assert status["candidate"] is None and "v99" in status["candidate_error"]
        open_coordination(reg).set_candidate("v1", None)
        status = loop_status(reg, None)
        assert status["candidate"] == "v1" and "candidate_error" not in status
    finally:
        reg.close()
