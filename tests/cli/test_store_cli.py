"""``tttembed store stats|prune|forget`` on a real SQLite store and a folder registry: what
each prints and writes as JSON, and a one-line error (exit 1) for every input a user can
get wrong, with nothing deleted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed.adapt.state import AdaptState
from tttembed.cli import app
from tttembed.loop.open import open_store
from tttembed.loop.rows import Event, Reward, SearchLog
from tttembed.registry.versions import Registry

runner = CliRunner()


def store_cli(*args: str):
    return runner.invoke(app, ["store", *args])


def one_line_error(r, code: int = 1) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.stderr
    return lines[0]


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A registry folder with its store: 40 searches two hours old, 10 new ones (those of
    session alice among them), clicks, one paid judgment; and 6 versions, v2 served."""
    root = tmp_path / "reg"
    reg = Registry(root, create=True)
    for i in range(6):
        st = AdaptState("task", ("t",), np.full((1, 4), i + 1.0, np.float32), np.array([0.5]),
                        np.array([10]), identity="st:x", dim=4, corpus_fingerprint="f",
                        scorer="s")
        reg.register(st)
    reg.promote("v2")
    store = open_store(None, root)
    now = time.time()
    old = [SearchLog(f"o{i}", "t", f"old question {i}", now - 7200 + i, None, ("d1", "d2"))
           for i in range(40)]
    new = [SearchLog(f"n{i}", "t", f"new question {i}", now - 5 + i * 0.1, None, ("d1",),
                     session="alice" if i < 3 else "")
           for i in range(10)]
    store.log_searches(old + new)
    store.add_events([Event(s.search_id, "d1", "click", s.search_id, "", "t", s.query, 1, 1,
                            0.0, s.created, s.created) for s in old[:10]])
    store.add_rewards([Reward("t", new[0].query, "d1", 1.0, now, "judge", True, True)])
    store.close()
    return root


def test_stats_say_what_is_stored(registry: Path) -> None:
    r = store_cli("stats", str(registry / "loop.sqlite"), "--registry", str(registry),
                  "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["tables"]["searches"]["rows"] == 50 and got["tables"]["events"]["rows"] == 10
    assert got["tables"]["searches"]["rows_last_hour"] == 10
    assert got["registry"]["versions"] == 6 and got["registry"]["served"] == "v2"
    text = store_cli("stats", str(registry))  # the registry folder: its loop.sqlite
    assert text.exit_code == 0 and "searches" in text.stdout and "registry" not in text.stdout


def test_prune_dry_run_then_for_real(registry: Path) -> None:
    dry = store_cli("prune", str(registry), "--older-than", "30m", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["store"]["rows"]["searches"] == 40
    r = store_cli("prune", str(registry), "--older-than", "30m", "--registry", str(registry),
                  "--keep-versions", "2")
    assert r.exit_code == 0, r.output
    assert "deleted 50 rows older than 30m (events 10, impressions 0, interventions 0, " \
           "searches 40)" in r.stdout
    # kept: v2 served (it replaced nothing: no rollback target), and two: v6 the newest,
    # v5 the newest refused candidate; no room for v1, v3, v4
    assert "deleted 3 registry versions (v1, v3, v4;" in r.stdout, r.stdout
    store = open_store(None, registry)
    try:
        assert len(store.searches()) == 10 and store.pruned()["searches"] == 40
    finally:
        store.close()


def test_forget_a_session(registry: Path) -> None:
    r = store_cli("forget", str(registry), "--session", "alice")
    assert r.exit_code == 0, r.output
    assert "deleted the session's 3 searches (searches 3); texts blanked, digests and " \
           "rewards kept: rewards 1" in r.stdout, r.stdout


@pytest.mark.parametrize("args,words", [
    (["prune", "{reg}", "--older-than", "5 minutes"], "is not a duration"),
    (["prune", "{reg}", "--older-than", "1m"], "shorter than the learner needs"),
    (["forget", "{reg}", "--session", "nobody"], "no search or event of that id"),
    (["forget", "{reg}"], "exactly one user"),
    (["stats", "{tmp}/nosuch.sqlite"], "does not exist"),
    (["stats", "{tmp}/notes.txt"], "is not a"),
])
def test_bad_input_is_one_line_and_deletes_nothing(registry: Path, tmp_path: Path,
                                                   args: list[str], words: str) -> None:
    (tmp_path / "notes.txt").write_text("not a database")
    r = store_cli(*[a.format(reg=registry, tmp=tmp_path) for a in args])
    assert words in one_line_error(r)
    store = open_store(None, registry)
    try:
        assert len(store.searches()) == 50
    finally:
        store.close()


@pytest.mark.parametrize("command", [["serve", "--index", "{tmp}/idx", "--registry", "{tmp}/r"],
                                     ["loop", "--registry", "{tmp}/r", "--index", "{tmp}/idx",
                                      "--judge", "bm25"]])
@pytest.mark.parametrize("retain,words", [("5x", "is not a duration"),
                                          ("2m", "shorter than the learner needs")])
def test_serve_and_loop_refuse_a_bad_window_first(tmp_path: Path, command: list[str],
                                                  retain: str, words: str) -> None:
    args = [a.format(tmp=tmp_path) for a in command]
    r = runner.invoke(app, [*args, "--retain", retain])
    assert words in one_line_error(r)
    assert not (tmp_path / "r").exists()  # refused before anything was made
