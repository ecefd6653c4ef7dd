"""``tttembed states add REGISTRY FILE``: a state learned offline (``tttembed learn -o``)
becomes a new version of a folder or PostgreSQL registry, checked against the registry's
embedder and corpus like every version, never promoted by itself."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.pg import database_fixtures
from tttembed.adapt.state import AdaptState, save_state
from tttembed.cli import app
from tttembed.core.errors import StateMismatch
from tttembed.registry.open import open_registry

pg_cluster, url = database_fixtures("add_")
INDEX = {"identity": "st:test", "corpus_fingerprint": "fp-docs"}


def _state(identity: str = "st:test", fingerprint: str = "fp-docs") -> AdaptState:
    v = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    return AdaptState("task", ("docs", "faq"), v, np.full(2, 0.5), np.ones(2, np.int64),
                      identity=identity, dim=4, corpus_fingerprint=fingerprint,
                      scorer="qrels:labels", budget=40)


def _made(spec: str) -> str:
    open_registry(spec, create=True, index=INDEX).close()
    return spec


@pytest.fixture
def folder(tmp_path) -> str:
    """A fresh folder registry for INDEX."""
    return _made(str(tmp_path / "reg"))


@pytest.fixture
def database(url: str) -> str:
    """A fresh PostgreSQL registry for INDEX (a new database)."""
    pytest.importorskip("psycopg", reason="pip install 'tttembed[loop]'")
    return _made(url)


def _add(registry: str, path) -> object:
    return CliRunner().invoke(app, ["states", "add", registry, str(path)])


def test_an_offline_state_becomes_a_new_version_not_promoted(folder, tmp_path):
    _added_not_promoted(folder, tmp_path)


def test_db_adds_an_offline_state(database, tmp_path):
    _added_not_promoted(database, tmp_path)


def _added_not_promoted(registry: str, tmp_path) -> None:
    path = save_state(tmp_path / "vectors.npz", _state())
    got = _add(registry, path)
    assert got.exit_code == 0, got.output
    assert "v1" in got.output and f"tttembed states promote {registry} v1" in got.output
    reg = open_registry(registry)
    (v1,) = reg.versions()
    assert reg.served() is None and not v1.promoted
    assert v1.manifest["added_from"] == str(path) and v1.manifest["parent"] is None
    assert np.allclose(v1.load().vectors, _state().vectors)
    reg.promote("v1", check=True)  # what the message says works
    assert reg.served() == "v1"
    listed = CliRunner().invoke(app, ["states", "list", registry, "--json"])
    assert json.loads(listed.output)["versions"][0]["added_by"] == "user"


MISMATCHES = [(_state(identity="st:other"), "identity"),
              (_state(fingerprint="fp-other"), "corpus")]


@pytest.mark.parametrize("state, field", MISMATCHES)
def test_a_state_of_another_embedder_or_corpus_is_refused_in_one_line(folder, tmp_path,
                                                                      state, field):
    _refused(folder, tmp_path, state, field)


@pytest.mark.parametrize("state, field", MISMATCHES)
def test_db_refuses_a_mismatch(database, tmp_path, state, field):
    _refused(database, tmp_path, state, field)


def _refused(registry: str, tmp_path, state: AdaptState, field: str) -> None:
    path = save_state(tmp_path / "vectors.npz", state)
    got = _add(registry, path)
    assert got.exit_code == 1
    lines = [ln for ln in got.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0] and str(path) in lines[0], got.output
    assert open_registry(registry).versions() == []
    with pytest.raises(StateMismatch):
        open_registry(registry).add(path)


def test_a_state_of_another_corpus_gets_a_hint_that_works(tmp_path):
    """issue 59: the refusal said `--allow-foreign-state`, which `states add` has not."""
    from tttembed.index.store import load_index, write_index
    from tttembed.registry.base import index_record

    vectors = np.eye(4, dtype=np.float32)
    write_index(tmp_path / "idx", ["a", "b", "c", "d"], vectors, embedder_identity="st:test",
                embedder_spec="st:test", corpus_fingerprint="fp-docs")
    registry = str(tmp_path / "reg")
    open_registry(registry, create=True, index=index_record(load_index(tmp_path / "idx")))
    path = save_state(tmp_path / "vectors.npz", _state(fingerprint="fp-other"))
    got = _add(registry, path)
    assert got.exit_code == 1
    line = " ".join(got.output.split())
    assert "--allow-foreign-state" not in line, line
    assert "learn it on the registry's index" in line and "another corpus" in line, line


def test_the_same_state_twice_is_recognised(folder, tmp_path):
    _added_twice(folder, tmp_path)


def test_db_recognises_the_same_state_twice(database, tmp_path):
    _added_twice(database, tmp_path)


def _added_twice(registry: str, tmp_path) -> None:
    """issue 59: PostgreSQL said "added ... as v1" twice, the folder made v2 silently."""
    path = save_state(tmp_path / "vectors.npz", _state())
    assert _add(registry, path).exit_code == 0
    again = _add(registry, path)
    assert again.exit_code == 0, again.output
    said = " ".join(again.output.split())
    assert f"{path} is already v1 (the same state" in said and "nothing added" in said, said
    # another path, the same state, saved at another time (the manifest's "created")
    copy = save_state(tmp_path / "copy" / "vectors.npz",
                      replace(_state(), created="2020-01-01T00:00:00+00:00"))
    assert "is already v1" in " ".join(_add(registry, copy).output.split())
    assert [v.name for v in open_registry(registry).versions()] == ["v1"]
    other = save_state(tmp_path / "other" / "vectors.npz",
                       AdaptState("task", ("docs",), np.ones((1, 4), np.float32),
                                  np.full(1, 0.5), np.ones(1, np.int64), identity="st:test",
                                  dim=4, corpus_fingerprint="fp-docs", scorer="qrels:labels",
                                  budget=40))
    assert "as v2" in _add(registry, other).output


@pytest.mark.parametrize("existing", [False, True])
def test_a_missing_state_or_checkpoint_is_named_not_the_registry(tmp_path, folder, existing):
    """Trust round 6 (issue 77, b): ``states add NEWDIR ckpt/gold`` with no such
    checkpoint named the missing checkpoint nowhere ("NEWDIR: not a state registry");
    the path that is missing is named, with what to give instead, whether or not the
    registry exists yet, and nothing is created."""
    reg = folder if existing else str(tmp_path / "newdir")
    missing = tmp_path / "ckpt" / "gold"
    res = CliRunner().invoke(app, ["states", "add", reg, str(missing)])
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert "\n" not in line and line.startswith(f"error: {missing}: no such "), line
    assert "not a state registry" not in line
    assert "tttembed learn -o" in line and "tttembed chain train" in line
    assert existing or not (tmp_path / "newdir").exists()
