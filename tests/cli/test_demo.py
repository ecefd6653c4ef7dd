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


def test_the_demo_says_plainly_what_its_state_does_for_new_questions():
    """Three verdicts: helps (interval above 0), kept but not shown, repeated only."""
    from types import SimpleNamespace

    from tttembed.cli.demo import unseen_verdict

    def c(delta, low, high):
        return SimpleNamespace(delta=delta, ci_low=low, ci_high=high, n=17)

    ev = {"task": {"gain": 0.01, "ci_low": -0.02, "ci_high": 0.04},
          "adapter": {"gain": 0.02, "ci_low": -0.01, "ci_high": 0.05}}
    raw = {"shared": {"stdlib-docs": "raw"}, "evidence": {"stdlib-docs": ev}}
    said = unseen_verdict(raw, c(0.0, 0.0, 0.0))
    assert "repeated questions only" in said and "task +0.0100" in said
    assert "adapter +0.0200 [-0.0100, +0.0500]" in said
    kept = {"shared": {"stdlib-docs": "adapter"}, "shared_alpha": {"stdlib-docs": "0.3"}}
    assert "helps the unseen questions, +0.0500" in unseen_verdict(kept, c(0.05, 0.01, 0.09))
    assert "(alpha 0.3)" in unseen_verdict(kept, c(0.05, 0.01, 0.09))
    assert "not shown above 0" in unseen_verdict(kept, c(0.02, -0.01, 0.05))
