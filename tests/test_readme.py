"""The README's Usage commands and Python section run as written (on a small slice of the
demo corpus: the export is restricted to a few stdlib modules to keep the test short)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

README = Path(__file__).resolve().parents[1] / "README.md"
MODULES = "json,csv,re,pathlib,functools,itertools,collections,shutil,os,os.path"


def _block(marker: str) -> str:
    """Every code block between ``<!-- marker -->`` and ``<!-- /marker -->``, joined."""
    text = README.read_text()
    section = text[text.index(f"<!-- {marker} -->"):text.index(f"<!-- /{marker} -->")]
    return "".join(re.findall(r"```\w+\n(.*?)```", section, re.S))


@pytest.fixture()
def small_demo(monkeypatch):
    from tttembed.demo import corpus, run

    full = corpus.demo_task
    monkeypatch.setattr(corpus, "demo_task",
                        lambda modules=(): full(tuple(modules) or tuple(MODULES.split(","))))
    return run


def test_readme_usage_commands_run_as_written(tmp_path, monkeypatch, small_demo, minilm):
    from tttembed.cli import app

    monkeypatch.chdir(tmp_path)
    lines = [ln for ln in _block("usage").splitlines() if ln.startswith("tttembed ")]
    assert len(lines) >= 8
    runner = CliRunner()
    for line in lines:
        r = runner.invoke(app, shlex.split(line)[1:])
        assert r.exit_code == 0, (line, r.output)
    assert Path("runs/adapted.trec").is_file() and Path("runs/rerank.trec").is_file()
    assert Path("task.npz").is_file() and Path("query.npz").is_file()
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    for line in [ln for ln in _block("vectordb").splitlines() if ln.startswith("tttembed ")]:
        r = runner.invoke(app, shlex.split(line)[1:])
        assert r.exit_code == 0, (line, r.output)
    assert Path("runs/adapted-milvus.trec").read_text().count("\n") > 0


def test_readme_python_section_runs(tmp_path, monkeypatch, small_demo, minilm, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(_block("python"), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "'requested'" in out and "py-demo-task.npz" in out
