"""What a server or a learner can know at start, it says at start (issue 59): a
``--min-queries`` that no promotion can reach, a ``serve --corpus`` that is not the
index's corpus (it failed at the first ``include``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.serve.conftest import make_app, setup  # noqa: F401
from tttembed.cli import app
from tttembed.core.errors import ConfigError


def test_a_min_queries_no_budget_can_reach_is_said_at_start(tmp_path):
    got = CliRunner().invoke(app, ["loop", "--registry", str(tmp_path / "reg"), "--index",
                                   str(tmp_path / "no-index"), "--judge", "bm25",
                                   "--min-queries", "1000000000"])
    said = " ".join(got.output.split())
    assert ("warning: --min-queries 1000000000: a promotion needs that many judged queries, "
            "and --judge-budget 1000 pairs judges at most 1000 queries" in said), said
    assert "no promotion can happen" in said
    from tttembed.loop.config import LoopConfig, never_promotes

    ok = LoopConfig(registry="r", index="i", judge="bm25", min_queries=20)
    assert never_promotes(ok) == ""


def _folder(root, docs) -> str:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t})
                                               + "\n" for d, t in docs.items()))
    return str(root)


def test_serve_corpus_of_another_fingerprint_is_refused_at_start(setup, minilm,  # noqa: F811
                                                                   tmp_path):
    other = _folder(tmp_path / "other", {"z1": "something else entirely"})
    with pytest.raises(ConfigError, match="--corpus .*fingerprints differ.*built from"):
        make_app(setup, minilm, corpus=other)
    same = _folder(tmp_path / "same", {d: v["text"] for d, v in setup["docs"].items()})
    assert make_app(setup, minilm, corpus=same) is not None
