"""State files: round trip, manifest, mismatch errors, no pickle; applying states."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from tttembed.adapt.apply import apply_state, apply_states
from tttembed.adapt.scopes import query_key, query_keys
from tttembed.adapt.state import AdaptState, load_state, save_state
from tttembed.core.errors import DataError, StateMismatch

ID = "st:bundled:all-MiniLM-L6-v2"


def unit(a):
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def make_state(scope="task", keys=("fiqa", "scifact"), d=8, seed=0):
    rng = np.random.default_rng(seed)
    g = len(keys)
    n_g = np.arange(1, g + 1)
    return AdaptState(scope, keys, rng.normal(size=(g, d)), n_g / (n_g + 1), n_g,
                      identity=ID, dim=d, hyperparameters={"steps": 300, "lr": 0.01},
                      scorer="qrels:", reward_mapping="grade/2", budget=40)


def test_round_trip_and_sidecar(tmp_path):
    st = make_state(keys=("fiqa", "scifact", "é/ü"))
    path = save_state(tmp_path / "out" / "vectors.npz", st)
    back = load_state(path, expected_identity=ID, expected_dim=8)
    assert back.keys == st.keys and back.scope == "task"
    np.testing.assert_array_equal(back.vectors, st.vectors)
    np.testing.assert_array_equal(back.alpha, st.alpha)
    np.testing.assert_array_equal(back.n_g, st.n_g)
    assert back.hyperparameters == {"steps": 300, "lr": 0.01}
    assert (back.scorer, back.reward_mapping, back.budget) == ("qrels:", "grade/2", 40)
    assert back.created == st.created and back.version == st.version
    side = json.loads((tmp_path / "out" / "vectors.json").read_text())
    assert side["identity"] == ID and side["dim"] == 8 and side["groups"] == 3
    assert side["scope"] == "task" and side["hyperparameters"]["steps"] == 300
    # a directory works as a path too; no temp files are left behind
    assert load_state(tmp_path / "out").keys == st.keys
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["vectors.json", "vectors.npz"]


def test_no_pickle_needed(tmp_path):
    path = save_state(tmp_path / "vectors.npz", make_state())
    with np.load(path, allow_pickle=False) as data:
        assert set(data.files) == {"vectors", "alpha", "n_g", "keys", "manifest"}
        for name in data.files:
            assert data[name].dtype != object
        assert data["keys"].dtype.kind == "U" and data["manifest"].shape == ()


def test_mismatch_errors(tmp_path):
    path = save_state(tmp_path / "vectors.npz", make_state())
    with pytest.raises(StateMismatch, match="openai:text-embedding-3-small"):
        load_state(path, expected_identity="openai:text-embedding-3-small")
    with pytest.raises(StateMismatch, match="dimension 8"):
        load_state(path, expected_dim=384)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_state(tmp_path / "nope.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(DataError, match="not a readable state"):
        load_state(bad)
    partial = tmp_path / "partial.npz"
    np.savez(partial, vectors=np.zeros((1, 2)))
    with pytest.raises(DataError, match="not a readable state"):
        load_state(partial)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, vectors=np.zeros((1, 2)), alpha=np.zeros(1), n_g=np.zeros(1),
             keys=np.array([{"a": 1}], dtype=object), manifest=np.array("{}"))
    with pytest.raises(DataError):
        load_state(pickled)
    with pytest.raises(DataError, match=".npz"):
        save_state(tmp_path / "vectors.bin", make_state())
    assert zipfile.is_zipfile(save_state(tmp_path / "v.npz", make_state()))


def test_inconsistent_state_is_rejected():
    with pytest.raises(DataError, match="disagree"):
        AdaptState("task", ("a", "b"), np.zeros((3, 4)), np.zeros(2), np.zeros(2), ID, 4)
    with pytest.raises(DataError, match="unique"):
        AdaptState("task", ("a", "a"), np.zeros((2, 4)), np.zeros(2), np.zeros(2), ID, 4)


def test_apply_state():
    rng = np.random.default_rng(1)
    st = make_state()
    x = unit(rng.normal(size=(3, 8)))
    out = apply_state(x, ["scifact", None, "other"], st)
    expect = unit(x[0] + st.alpha[1] * st.vectors[1])
    np.testing.assert_allclose(out[0], expect, atol=1e-6)
    np.testing.assert_array_equal(out[1:], x[1:])
    assert out.dtype == np.float32
    with pytest.raises(StateMismatch):
        apply_state(unit(rng.normal(size=(3, 5))), ["fiqa"] * 3, st)


def test_apply_states_precedence():
    rng = np.random.default_rng(2)
    glob = make_state("global", ("*",), seed=3)
    task = make_state("task", ("fiqa",), seed=4)
    query = make_state("query", (query_key("fiqa", "q one"),), seed=5)
    x = unit(rng.normal(size=(3, 8)))
    keys = {"global": ["*"] * 3, "task": ["fiqa", "fiqa", "scifact"],
            "query": query_keys("query", ["q one", "q two", "q one"],
                                ["fiqa", "fiqa", "scifact"])}
    out = apply_states(x, keys, [glob, task, query])
    np.testing.assert_allclose(out[0], unit(x[0] + query.alpha[0] * query.vectors[0]), atol=1e-6)
    np.testing.assert_allclose(out[1], unit(x[1] + task.alpha[0] * task.vectors[0]), atol=1e-6)
    np.testing.assert_allclose(out[2], unit(x[2] + glob.alpha[0] * glob.vectors[0]), atol=1e-6)
    with pytest.raises(DataError, match="no task-wise query keys"):
        apply_states(x, {"global": ["*"] * 3}, [task])


def _tamper(path, **changes):
    """Rewrite the state file at ``path`` with some arrays or manifest fields changed."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: np.array(data[k]) for k in data.files}
    manifest = json.loads(str(arrays["manifest"][()]))
    manifest.update(changes.pop("manifest", {}))
    arrays.update(changes)
    arrays["manifest"] = np.array(json.dumps(manifest))
    np.savez(path, **arrays)


@pytest.mark.parametrize("change,message", [
    ({"vectors": np.array([[0.1] * 8, [np.nan] * 8, [0.2] * 8])}, "vector row 1 .* not finite"),
    ({"manifest": {"dim": 16}}, "manifest dimension is 16 but the vectors have shape"),
    ({"manifest": {"dim": "8"}}, "not a positive integer"),
    ({"manifest": {"scope": "corpus"}}, "unknown state scope 'corpus'"),
    ({"manifest": {"groups": 5}}, "manifest counts 5 groups"),
    ({"alpha": np.array([0.5, 1.5, 0.2])}, r"alphas must lie in \[0, 1\]"),
    ({"alpha": np.array([0.5, 0.2])}, "state arrays disagree"),
    ({"n_g": np.array([1, -2, 3])}, "negative counts"),
    ({"n_g": np.array([1.0, 2.0, 3.0])}, "n_g has dtype float64"),
    ({"manifest": {"scope": "global"}}, "a global state has the one key"),
    ({"manifest": {"identity": None, "dim": None}}, "not a positive integer"),
])
def test_a_tampered_state_is_refused_with_its_path(tmp_path, change, message):
    """Every defect of a state file is a DataError that names the file (never a silent run)."""
    path = save_state(tmp_path / "v.npz", make_state(keys=("a", "b", "c")))
    _tamper(path, **change)
    with pytest.raises(DataError, match=message) as info:
        load_state(path)
    assert str(info.value).startswith(f"{path}: ")


def test_a_query_wise_state_keyed_by_id_is_refused(tmp_path):
    """Query ids are file-local: a query-wise file keyed ``task/qid`` (older, hand-made)
    cannot prove which queries it belongs to, so it is refused, never applied."""
    path = save_state(tmp_path / "v.npz", make_state(keys=("a", "b", "c")))
    _tamper(path, manifest={"scope": "query"}, keys=np.array(["t/q1", "t/q2", "t/q3"]))
    with pytest.raises(StateMismatch, match="keyed by query id") as info:
        load_state(path)
    assert str(info.value).startswith(f"{path}: ")
    with pytest.raises(StateMismatch, match="does not name a query text"):
        make_state("query", ("t/q1",))


def test_a_failed_save_leaves_the_old_pair_and_no_temp(tmp_path, monkeypatch):
    """Disk full while writing the .npz: the old .npz + .json stay, no new file, no temp."""
    import errno

    old = make_state(keys=("a",), seed=1)
    path = save_state(tmp_path / "v.npz", old)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full(fh, **arrays):
        fh.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match="No space left"):
        save_state(path, make_state(keys=("b",), seed=2), overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    with pytest.raises(OSError):
        save_state(tmp_path / "new.npz", make_state(keys=("b",), seed=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json", "v.npz"]
    monkeypatch.undo()
    assert load_state(path).keys == ("a",)


def test_save_refuses_while_another_writer_holds_the_file(tmp_path):
    """A second writer of the same state file gets a ConfigError naming it."""
    from tttembed.core.io import writer_lock

    path = tmp_path / "v.npz"
    with writer_lock(path):
        import subprocess
        import sys
        code = ("from tests.adapt.test_state import make_state; "
                "from tttembed.adapt.state import save_state; "
                f"save_state({str(path)!r}, make_state())")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
    assert res.returncode == 1 and "ConfigError" in res.stderr
    assert f"{path} is being written by another process" in res.stderr
    assert not path.exists()
    save_state(path, make_state())


def test_a_mixed_state_applies_a_querys_own_key_before_its_tasks(tmp_path):
    """``--method auto``'s file: task keys (the shared part) and query keys (the query
    part) together; a rewarded text gets its own vector, another text of the task the
    task's, another task nothing; it also outranks a plain task-wise state."""
    from tttembed.adapt.apply import lookup_keys

    keys = ("fiqa", query_key("fiqa", "q one"), query_key("scifact", "q two"))
    st = AdaptState("mixed", keys, np.eye(3, 8), np.array([0.5, 1.0, 1.0]),
                    np.array([4, 1, 1]), identity=ID, dim=8, method="auto",
                    selection={"choice": {"fiqa": "task+qdrant-rf", "scifact": "query"}})
    back = load_state(save_state(tmp_path / "m.npz", st))
    assert (back.scope, back.method, back.selection) == ("mixed", "auto", st.selection)
    assert back.tasks == ["fiqa", "scifact"]
    x = unit(np.random.default_rng(1).normal(size=(4, 8)))
    texts, tasks = ["q one", "q other", "q two", "q one"], ["fiqa", "fiqa", "scifact", "cisi"]
    other = make_state(keys=("fiqa",), seed=3)
    out = apply_states(x, lookup_keys([back, other], texts, tasks), [other, back])
    np.testing.assert_allclose(out[0], unit(x[0] + 1.0 * back.vectors[1]), atol=1e-6)
    np.testing.assert_allclose(out[1], unit(x[1] + 0.5 * back.vectors[0]), atol=1e-6)
    np.testing.assert_allclose(out[2], unit(x[2] + 1.0 * back.vectors[2]), atol=1e-6)
    np.testing.assert_allclose(out[3], x[3], atol=1e-7)  # cisi: no key, unchanged
    with pytest.raises(StateMismatch, match="does not name a query text"):
        AdaptState("mixed", ("fiqa/q01",), np.zeros((1, 8)), np.ones(1), np.ones(1),
                   identity=ID, dim=8)


def test_only_method_auto_may_save_a_state_without_vectors(tmp_path):
    empty = dict(keys=(), vectors=np.zeros((0, 8)), alpha=np.zeros(0), n_g=np.zeros(0),
                 identity=ID, dim=8)
    with pytest.raises(DataError, match="nothing to save"):
        save_state(tmp_path / "a.npz", AdaptState("task", **empty))
    path = save_state(tmp_path / "b.npz", AdaptState("mixed", method="auto", **empty))
    assert load_state(path).keys == ()
