from __future__ import annotations

import re

from typer.testing import CliRunner

from tttembed.cli import app
from tttembed.core.io import resolve_version

runner = CliRunner()
MODULES = "json,csv,shutil,os.path,pathlib,tempfile,gzip,heapq,statistics,difflib,subprocess,glob"


def test_demo_runs_offline_end_to_end_on_a_module_subset(tmp_path, minilm):
    args = ["demo", "--workdir", str(tmp_path / "w"), "--modules", MODULES]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "raw search, all questions" in r.output and "unseen questions (20%" in r.output
    assert "guarded (learn --method auto)" in r.output and "asked again" in r.output
    assert (resolve_version(tmp_path / "w" / "index") / "manifest.json").exists()
    assert (tmp_path / "w" / "vectors.npz").exists() and (tmp_path / "w" / "raw.trec").exists()
    ndcgs = [float(x) for x in re.findall(r"│\s+\d+ │\s+([01]\.\d{4}) │", r.output)]
    assert len(ndcgs) == 5 and all(0 < x <= 1 for x in ndcgs)  # raw; seen raw/adapted; unseen
    assert "method auto: per task" in r.output and "<- chosen" in r.output
    # a second run makes no model call: everything comes from the embedding cache
    r2 = runner.invoke(app, args)
    assert r2.exit_code == 0 and "model calls this run: 0" in r2.output


def test_demo_with_modules_holding_no_labels_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["demo", "--workdir", str(tmp_path), "--modules", "colorsys"])
    assert r.exit_code == 1 and "no shipped question" in r.stderr
