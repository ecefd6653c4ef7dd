"""A third-party scorer registered through the ``tttembed.scorers`` entry-point group runs
``learn`` end to end with no change to tttembed (a real installed distribution's metadata
on sys.path, as pip would write it)."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys

from typer.testing import CliRunner

from tttembed.cli import app

from .test_cli import CORPUS, QRELS, QUERIES, _write_beir

PLUGIN = '''
import numpy as np

class OverlapScorer:
    """Reward = share of the query's words found in the document."""
    mapping = "word-overlap"

    def __init__(self, rest, **options):
        self.spec = "overlap:" + rest
        self.identity = self.spec + " v1"

    def score(self, query, docs):
        words = set(query.text.lower().split())
        return np.array([len(words & set(d.text.lower().split())) / max(len(words), 1)
                         for d in docs], dtype=np.float64)
'''


def _install_plugin(root, monkeypatch):
    (root / "overlap_plugin.py").write_text(PLUGIN)
    dist = root / "overlap_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: overlap-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[tttembed.scorers]\noverlap = overlap_plugin:OverlapScorer\n")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    sys.modules.pop("overlap_plugin", None)


def test_third_party_scorer_through_entry_point_runs_learn(tmp_path, monkeypatch, minilm):
    (tmp_path / "site").mkdir()
    _install_plugin(tmp_path / "site", monkeypatch)
    names = [ep.name for ep in importlib.metadata.entry_points(group="tttembed.scorers")]
    assert "overlap" in names
    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", str(tmp_path / "idx")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["learn", str(data), "--index", str(tmp_path / "idx"), "--scorer",
                            "overlap:x", "--budget", "2", "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "v.json").read_text())
    assert meta["scorer"] == "overlap:x v1" and meta["reward_mapping"] == "word-overlap"
    assert meta["pairs"]["paid"] == meta["pairs"]["requested"] > 0  # went through the ledger
    r = runner.invoke(app, ["learn", str(data), "--index", str(tmp_path / "idx"), "--scorer",
                            "overlap:x", "--budget", "2", "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 1 and "already exists; pass --overwrite" in r.output
