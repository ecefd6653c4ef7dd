from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import HashEmbedder, tiny_corpus
from tttembed import api
from tttembed.core.errors import ConfigError, StateMismatch
from tttembed.embed.cache import CachedEmbedder
from tttembed.index.search import encode_and_search, encode_queries, read_run, write_run


@pytest.fixture()
def fake_index(tmp_path):
    emb = CachedEmbedder(HashEmbedder(dim=16), tmp_path / "cache")
    api.index_corpus(tiny_corpus(60), tmp_path / "idx", embedder=emb)
    return api.open_index(tmp_path / "idx", embedder=emb), emb


def test_queries_are_encoded_in_batches(fake_index):
    index, emb = fake_index
    inner = emb.inner
    before = inner.calls
    texts = [f"query {i}" for i in range(25)]
    vecs = encode_queries(emb, texts, batch_size=10)
    assert vecs.shape == (25, 16)
    assert inner.calls - before == 3


def test_search_returns_brute_force_top_k_as_beir_run(fake_index):
    index, emb = fake_index
    queries = {"a": "topic 1", "b": "topic 2"}
    result = encode_and_search(index, queries, emb, k=7)
    assert result.scores.shape == (2, 7) and result.rows.shape == (2, 7)
    run = result.to_run()
    qv = emb.encode(list(queries.values()), "query")
    brute = qv @ np.asarray(index.vectors).T
    for i, qid in enumerate(queries):
        expected = [index.doc_ids[j] for j in np.argsort(-brute[i])[:7]]
        assert list(result.to_run()[qid]) == expected
        assert set(run[qid]) == set(expected)
    assert set(result.timings) == {"encode_s", "search_s"}


def test_top_k_larger_than_corpus_and_bad_k(fake_index):
    index, emb = fake_index
    result = encode_and_search(index, {"q": "x"}, emb, k=1000)
    assert len(result.to_run()["q"]) == 60
    with pytest.raises(ConfigError):
        encode_and_search(index, {"q": "x"}, emb, k=0)


def test_api_refuses_another_embedder(fake_index):
    index, _ = fake_index
    with pytest.raises(StateMismatch):
        api.search(index, {"q": "x"}, embedder=HashEmbedder(dim=16, spec="fake:other"))


@pytest.mark.parametrize("name", ["run.trec", "run.jsonl"])
def test_run_files_round_trip(tmp_path, name):
    run = {"q1": {"d1": 0.9, "d2": 0.5}, "q2": {"d3": 0.1}}
    path = write_run(run, tmp_path / name)
    back = read_run(path)
    assert back == {"q1": {"d1": 0.9, "d2": 0.5}, "q2": {"d3": 0.1}}
    if name.endswith(".trec"):
        first = path.read_text().splitlines()[0].split()
        assert first == ["q1", "Q0", "d1", "1", "0.9", "tttembed"]


def test_real_model_finds_the_matching_document(minilm, tmp_path):
    corpus = {
        "cats": {"title": "Cats", "text": "Cats are small domesticated carnivorous mammals."},
        "rust": {"title": "Rust", "text": "Rust is a systems programming language focused on safety."},
        "paris": {"title": "Paris", "text": "Paris is the capital and largest city of France."},
    }
    emb = CachedEmbedder(minilm, tmp_path / "c")
    api.index_corpus(corpus, tmp_path / "idx", embedder=emb)
    index = api.open_index(tmp_path / "idx", embedder=emb)
    result = api.search(index, {"q1": "What is the capital of France?",
                                "q2": "memory-safe programming languages"}, embedder=emb, k=3)
    cands = {q: list(r) for q, r in result.to_run().items()}
    assert cands["q1"][0] == "paris" and cands["q2"][0] == "rust"


@pytest.mark.parametrize("name", ["run.trec", "run.jsonl"])
def test_run_files_keep_full_precision(tmp_path, name):
    """Scores that differ past the 6th decimal stay different in the file (trec_eval and
    pytrec_eval then break ties as the console's metrics do), and read back exactly."""
    run = {"q1": {"a": 0.7000000123, "b": 0.7000000456, "c": float(np.float32(0.1234567))},
           "q2": {"x": 1e-9, "y": 0.5}}
    path = write_run(run, tmp_path / name)
    assert read_run(path) == run
    if name.endswith(".trec"):
        lines = path.read_text().splitlines()
        assert lines[0].split()[2:4] == ["b", "1"] and lines[1].split()[2:4] == ["a", "2"]
