"""The pipeline's front pieces: corpus arguments, query sets, the settings objects the API
takes (``Ray``, ``HttpLimits``), and a dry-run learn's state."""

from __future__ import annotations

import json

import pytest

import tttembed.api as tt
from tttembed.core.errors import ConfigError
from tttembed.execute.config import executor_name, resolve_executor
from tttembed.ttt.corpus import read_corpus
from tttembed.ttt.queries import QuerySet, as_query_set

CORPUS = {"d1": {"title": "Cats", "text": "cats sleep"}, "d2": {"title": "", "text": "dogs run"}}


def test_read_corpus_from_a_dict_a_file_and_a_folder(tmp_path):
    assert read_corpus(CORPUS) == (CORPUS, "<dict>")
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, **doc}) + "\n" for d, doc in CORPUS.items()))
    assert read_corpus(tmp_path) == (CORPUS, str(tmp_path))
    assert read_corpus(tmp_path / "corpus.jsonl")[0] == CORPUS


def test_as_query_set_passes_a_query_set_through_and_names_dict_tasks():
    qs = as_query_set({"q1": "cats", "q2": "dogs"}, task="pets")
    assert (qs.tasks, qs.qids, qs.texts) == (("pets", "pets"), ("q1", "q2"), ("cats", "dogs"))
    assert as_query_set(qs) is qs and isinstance(qs, QuerySet)


def test_executor_settings_are_one_object():
    assert resolve_executor("local") is None
    assert resolve_executor("ray") == tt.Ray()
    ray = tt.Ray(address="auto", actors=4, gpus=1)
    assert resolve_executor(ray) is ray and executor_name(ray) == "ray"
    with pytest.raises(ConfigError, match="unknown executor 'dask'; choose one of local, ray"):
        resolve_executor("dask")
    with pytest.raises(ConfigError, match="at least 1"):
        tt.Ray(actors=0)


def test_http_limits_give_options_to_http_backends_only():
    limits = tt.HttpLimits(timeout=5, max_retries=2, concurrency=4, rpm=60)
    assert limits.options("openai:m@http://127.0.0.1:1/v1") == {
        "timeout": 5, "max_retries": 2, "max_concurrency": 4, "rpm": 60}
    assert limits.options("bm25") == {} and tt.HttpLimits().options("rerank:m") == {}


def test_dry_run_learn_returns_the_plan_as_a_state(tmp_path, minilm):
    index = tt.index_corpus(CORPUS, tmp_path / "idx", embedder=minilm)
    state = tt.learn(index, {"q1": "sleeping cats", "q2": "running dogs"}, scorer="bm25",
                     budget=1, depth=1, dry_run=True, embedder=minilm, corpus=CORPUS,
                     task="pets")
    assert state.dry_run and state.vectors.shape == (0, index.dim)
    assert state.pairs == {"requested": 2, "in_ledger": 0, "to_pay": 2} and state.budget == 2
