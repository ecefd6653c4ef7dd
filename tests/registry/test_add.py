"""``tttembed states add REGISTRY FILE``: a state learned offline (``tttembed learn -o``)
becomes a new version of a folder or PostgreSQL registry, checked against the registry's
embedder and corpus like every version, never promoted by itself."""

from __future__ import annotations

import json

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
