from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tttembed.cli import app as cli_app

from .evaldata import write_tasks


@pytest.fixture()
def app():
    return cli_app


def test_eval_prints_tables_and_writes_a_report(app, tmp_path, minilm):
    """Old spellings (--tasks, --budgets, --scopes, --report) still work, with a note."""
    data = write_tasks(tmp_path / "data")
    out = tmp_path / "rep"
    args = ["eval", "--tasks", "alpha,beta", "--data-root", str(data), "--scorer", "bm25",
            "--budgets", "1,10", "--scopes", "task,query", "--baselines", "direct",
            "--protocol", "fixed", "--resamples", "50", "--cache-dir", str(tmp_path / "c"),
            "--report", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Fixed population" in res.output and "AUBC" in res.output
    assert "few queries: alpha, beta" in res.output
    data_json = json.loads((out / "results.json").read_text())
    assert data_json["config"]["scopes"] == ["task", "query"]
    assert data_json["config"]["budgets"] == [1.0, 10.0]
    assert (out / "report.md").read_text().startswith("# tttembed eval report")
    assert list(out.glob("gain_*.png"))
    again = CliRunner().invoke(app, args[:-2])
    assert again.exit_code == 0
    assert "embedding model calls 0, scorer calls (paid pairs) 0" in again.output
    assert "note: --tasks is an old spelling" in res.output
    # an existing report folder is refused without --overwrite, kept as it was
    before = (out / "results.json").read_text()
    res = CliRunner().invoke(app, ["eval", "alpha,beta", "--data-root", str(data), "--budget",
                                   "1,10", "--scope", "task,query", "--baselines", "direct",
                                   "--resamples", "50", "--cache-dir", str(tmp_path / "c"),
                                   "--out", str(out)])
    assert res.exit_code == 1 and "already exists; pass --overwrite" in res.output
    assert (out / "results.json").read_text() == before


def test_bad_input_messages(app, tmp_path):
    data = write_tasks(tmp_path / "data")
    base = ["eval", "alpha", "--data-root", str(data)]
    res = CliRunner().invoke(app, base + ["--protocol", "sideways"])
    assert res.exit_code == 1 and "unknown protocol 'sideways'" in res.output
    res = CliRunner().invoke(app, base + ["--budget", "1,x"])
    assert res.exit_code == 2 and "not a number" in res.output
    res = CliRunner().invoke(app, ["eval", "nope", "--data-root", str(data)])
    assert res.exit_code == 1 and "no dataset 'nope'" in res.output
    res = CliRunner().invoke(app, base + ["--select", "best"])
    assert res.exit_code == 1 and "unknown selection 'best'" in res.output


def test_eval_select_auto_adds_the_auto_row(app, tmp_path, minilm):
    data = write_tasks(tmp_path / "data")
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, [
        "eval", "alpha,beta", "--data-root", str(data), "--scorer", "bm25", "--budget", "1,10",
        "--scope", "task", "--baselines", "direct", "--select", "auto", "--resamples", "50",
        "--cache-dir", str(tmp_path / "c"), "--out", str(out), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "│ auto " in res.output and "auto +" in res.output.split("AUBC", 1)[1].splitlines()[0] \
        or "auto -" in res.output.split("AUBC", 1)[1].splitlines()[0]
    rows = json.loads((out / "results.json").read_text())["sections"][0]["rows"]
    auto = [r for r in rows if r["method"] == "auto"]
    assert len(auto) == 2 and all(set(r["chosen"]) == {"alpha", "beta"} for r in auto)
    assert all(r["B"] >= r["validation"]["paid"] for r in auto)
    assert "auto" in json.loads((out / "results.json").read_text())["sections"][0]["harm"]
