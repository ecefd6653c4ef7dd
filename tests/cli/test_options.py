"""One CLI: every option has help text, old spellings still work, outputs are never
overwritten silently, foreign states are refused."""

from __future__ import annotations

import json

import click
import pytest
import typer
from typer.testing import CliRunner

from tttembed.cli import app, rewrite_aliases

from .test_cli import CORPUS, QRELS, QUERIES, _write_beir

runner = CliRunner()


def _commands(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def test_every_option_and_argument_has_help():
    missing = []
    for name, cmd in _commands(typer.main.get_command(app)):
        for p in cmd.params:
            if not getattr(p, "help", None):
                missing.append(f"{name} {p.name}")
    assert not missing, missing


def test_short_options_mean_one_thing_everywhere():
    seen: dict[str, set[str]] = {}
    for _, cmd in _commands(typer.main.get_command(app)):
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-") and not opt.startswith("--"):
                    seen.setdefault(opt, set()).add(p.name)
    assert all(len(v) == 1 for v in seen.values()), seen
    assert "-q" not in seen  # -q was --queries in search and --quiet in chain


def test_old_spellings_are_rewritten():
    assert rewrite_aliases(["search", "--queries", "q.jsonl", "-s", "v.npz"]) == \
        ["search", "q.jsonl", "--state", "v.npz"]
    assert rewrite_aliases(["eval", "--tasks=a,b", "--report", "r", "--budgets", "1"]) == \
        ["eval", "a,b", "--out", "r", "--budget", "1"]
    assert rewrite_aliases(["chain", "search", "d", "-q", "--adapter", "c"]) == \
        ["chain", "search", "d", "--quiet", "--encoder", "c"]
    assert rewrite_aliases(["learn", "-s", "bm25"]) == ["learn", "-s", "bm25"]  # -s = scorer


@pytest.fixture()
def beir(tmp_path, minilm):
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    idx = tmp_path / "idx"
    assert runner.invoke(app, ["index", str(data), "--out", str(idx)]).exit_code == 0
    return data, idx


def test_outputs_are_never_overwritten_silently(beir, tmp_path):
    data, idx = beir
    run = tmp_path / "raw.trec"
    assert runner.invoke(app, ["search", str(data), "-i", str(idx), "-o", str(run)]).exit_code == 0
    before = run.read_text()
    r = runner.invoke(app, ["search", str(data), "-i", str(idx), "-o", str(run), "-k", "1"])
    assert r.exit_code == 1 and "already exists; pass --overwrite" in r.output
    assert run.read_text() == before
    r = runner.invoke(app, ["search", str(data), "-i", str(idx), "-o", str(run), "-k", "1",
                            "--overwrite"])
    assert r.exit_code == 0 and run.read_text() != before


def test_state_from_another_corpus_is_refused_unless_allowed(beir, tmp_path):
    data, idx = beir
    r = runner.invoke(app, ["learn", str(data), "-i", str(idx), "-s", f"qrels:{data}", "-b", "2",
                            "-o", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    other = dict(CORPUS, extra={"title": "Tides", "text": "The moon pulls the sea."})
    data2 = _write_beir(tmp_path / "data2", other, QUERIES, QRELS)
    idx2 = tmp_path / "idx2"
    assert runner.invoke(app, ["index", str(data2), "--out", str(idx2)]).exit_code == 0
    args = ["search", str(data2), "-i", str(idx2), "--task", data.name, "--state",
            str(tmp_path / "v.npz")]
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and "learned on another corpus" in r.output
    assert "--allow-foreign-state" in r.output
    r = runner.invoke(app, args + ["--allow-foreign-state"])
    assert r.exit_code == 0 and "applied to 2 of 2 queries" in r.output, r.output
    meta = json.loads((tmp_path / "v.json").read_text())
    assert meta["corpus_fingerprint"] and meta["pairs"]["requested"] > 0


def test_missing_query_path_says_not_found(beir, tmp_path):
    _, idx = beir
    r = runner.invoke(app, ["search", str(tmp_path / "nope.jsonl"), "-i", str(idx)])
    assert r.exit_code == 1 and "not found" in r.output and "nope.jsonl" in r.output


def test_learn_dry_run_agrees_with_the_real_run(beir, tmp_path):
    data, idx = beir
    base = ["learn", str(data), "-i", str(idx), "-s", "bm25", "-b", "2"]
    r = runner.invoke(app, base + ["--dry-run"])
    assert r.exit_code == 0 and "already in the ledger: 0; to pay: 4" in r.output, r.output
    assert runner.invoke(app, base + ["-o", str(tmp_path / "a.npz")]).exit_code == 0
    r = runner.invoke(app, base + ["-b", "3", "--dry-run"])
    dry = r.output
    r = runner.invoke(app, base + ["-b", "3", "-o", str(tmp_path / "b.npz")])
    assert "already in the ledger: 4; to pay: 2" in dry, dry
    assert "served from the ledger 4, paid 2" in r.output, r.output
