"""Vector-database index backends against FAISS flat, on the real engines: Milvus Lite and
Qdrant local mode (skipped when the extra is missing), and a real server when
``TTTEMBED_MILVUS_URI`` (e.g. ``http://127.0.0.1:19530``) or ``TTTEMBED_QDRANT_URL``
(e.g. ``http://127.0.0.1:6333``) is set. Same top-10 ids as FAISS for raw and adapted
queries (ties aside), same learned state (1e-5), manifest checks, and the CLI."""

from __future__ import annotations

import json
import os
import uuid

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed.cli import app
from tttembed.core.errors import ConfigError, DataError, StateMismatch

TOPICS = ["cats", "dogs", "volcanoes", "tides", "photosynthesis", "rockets", "bread",
          "chess", "rivers", "vaccines"]
ASPECTS = ["history of", "how to care for", "the physics behind", "common myths about"]
CORPUS = {f"d{i}_{j}": {"title": t.title(), "text": f"An article on the {a} {t}, part {j}."}
          for i, t in enumerate(TOPICS) for j, a in enumerate(ASPECTS)}
QUERIES = {f"q{i}": f"tell me about the {a} {t}" for i, (t, a)
           in enumerate(zip(TOPICS, ASPECTS * 3))}
QRELS = {f"q{i}": {f"d{i}_{(i + 1) % 4}": 1, f"d{(i + 3) % 10}_0": 1} for i in range(10)}
KINDS = ["milvus", "qdrant", "milvus-server", "qdrant-server"]
EXTRA = {"milvus": "pymilvus", "qdrant": "qdrant_client"}


def spec_for(kind: str, root) -> str:
    engine = kind.split("-")[0]
    pytest.importorskip(EXTRA[engine], reason=f"extra tttembed[{engine}] not installed")
    if engine == "milvus":
        pytest.importorskip("milvus_lite", reason="milvus-lite not installed")
    name = f"t{uuid.uuid4().hex[:12]}"
    if kind == "milvus":
        return f"milvus:{root}/milvus.db/{name}"
    if kind == "qdrant":
        return f"qdrant:{root}/qdrant/{name}"
    var = "TTTEMBED_MILVUS_URI" if engine == "milvus" else "TTTEMBED_QDRANT_URL"
    if not os.environ.get(var):
        pytest.skip(f"{var} is not set (point it at a running {engine} server to run this)")
    return f"{engine}:{os.environ[var].rstrip('/')}/{name}"


@pytest.fixture(scope="module")
def faiss_setup(tmp_path_factory, minilm):
    import tttembed.api as tt
    from tttembed.score.qrels import QrelsScorer

    root = tmp_path_factory.mktemp("vdb")
    index = tt.index_corpus(CORPUS, root / "faiss", embedder=minilm)
    scorer = QrelsScorer("labels", qrels=QRELS)
    states = {scope: tt.learn(index, QUERIES, scorer=scorer, scope=scope, budget=5,
                              task="t", embedder=minilm, corpus=CORPUS)
              for scope in ("task", "query")}
    return {"root": root, "index": index, "states": states, "scorer": scorer}


@pytest.fixture(scope="module", params=KINDS)
def db_index(request, faiss_setup, minilm):
    import tttembed.api as tt

    spec = spec_for(request.param, faiss_setup["root"])
    seen: list[int] = []
    from tttembed.index.store import build_index

    build_index(CORPUS, minilm, spec, write_progress=seen.append)
    assert sum(seen) == len(CORPUS)
    return tt.open_index(spec, embedder=minilm)


def assert_same_topk(a, b, k: int = 10) -> None:
    """Same ranked ids and scores; where ids differ, the scores must tie."""
    np.testing.assert_allclose(a.scores[:, :k], b.scores[:, :k], atol=1e-5)
    for i in range(len(a.qids)):
        ids_a = [a.doc_ids[r] for r in a.rows[i, :k]]
        ids_b = [b.doc_ids[r] for r in b.rows[i, :k]]
        for j, (x, y) in enumerate(zip(ids_a, ids_b)):
            if x != y:
                tied = np.isclose(a.scores[i], a.scores[i, j], atol=1e-5)
                assert tied.sum() > 1, f"query {a.qids[i]} rank {j}: {x} vs {y}"


def test_backend_is_a_collection(db_index, faiss_setup):
    from tttembed.index.base import Index

    assert isinstance(db_index, Index) and str(db_index.path).split(":")[0] in ("milvus", "qdrant")
    assert len(db_index) == len(CORPUS) and db_index.dim == 384
    assert db_index.doc_ids == faiss_setup["index"].doc_ids
    m, f = db_index.manifest, faiss_setup["index"].manifest
    for key in ("embedder", "embedder_spec", "dim", "corpus_fingerprint", "metric", "n_docs"):
        assert m[key] == f[key]
    rows = np.array([[3, 0], [len(CORPUS) - 1, 7]])
    np.testing.assert_allclose(db_index.get_vectors(rows),
                               faiss_setup["index"].get_vectors(rows), atol=1e-6)


@pytest.mark.parametrize("scope", [None, "task", "query"])
def test_same_top10_as_faiss(db_index, faiss_setup, minilm, scope):
    import tttembed.api as tt

    states = [faiss_setup["states"][scope]] if scope else []
    kw = dict(k=10, task="t", embedder=minilm, states=states)
    ref = tt.search(faiss_setup["index"], QUERIES, **kw)
    got = tt.search(db_index, QUERIES, **kw)
    assert_same_topk(got, ref)
    if scope:  # the state really moved the ranking
        raw = tt.search(faiss_setup["index"], QUERIES, k=10, embedder=minilm)
        assert not np.array_equal(raw.rows, ref.rows)


@pytest.mark.parametrize("scope", ["task", "query"])
def test_learn_gives_the_same_state(db_index, faiss_setup, minilm, scope):
    import tttembed.api as tt

    state = tt.learn(db_index, QUERIES, scorer=faiss_setup["scorer"], scope=scope, budget=5,
                     task="t", embedder=minilm, corpus=CORPUS)
    ref = faiss_setup["states"][scope]
    assert state.keys == ref.keys
    np.testing.assert_allclose(state.vectors, ref.vectors, atol=1e-5)
    np.testing.assert_allclose(state.alpha, ref.alpha, atol=1e-5)


def test_refuses_foreign_state_embedder_and_overwrite(db_index, faiss_setup, minilm, tmp_path):
    import tttembed.api as tt
    from tttembed.index.store import build_index

    other = tt.index_corpus({"x": {"title": "", "text": "another corpus entirely"},
                             "y": {"title": "", "text": "with two documents"}},
                            tmp_path / "other", embedder=minilm)
    foreign = tt.learn(other, {"q": "documents"}, scorer=faiss_setup["scorer"].__class__(
        "labels", qrels={"q": {"y": 1}}), scope="task", budget=2, task="t", embedder=minilm,
        corpus={"x": {"title": "", "text": "another corpus entirely"},
                "y": {"title": "", "text": "with two documents"}})
    with pytest.raises(StateMismatch, match="another corpus"):
        tt.search(db_index, QUERIES, k=5, task="t", embedder=minilm, states=[foreign])
    with pytest.raises(StateMismatch, match="built with embedder"):
        tt.open_index(str(db_index.path), embedder=_Renamed(minilm))
    with pytest.raises(ConfigError, match="already exists"):
        build_index(CORPUS, minilm, str(db_index.path))


class _Renamed:
    def __init__(self, emb) -> None:
        self.identity, self.dim = "st:other", emb.dim


@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_missing_or_incomplete_collection_is_refused(kind, tmp_path):
    from tttembed.core.backends import create
    from tttembed.index.store import load_index

    spec = spec_for(kind, tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_index(spec)
    store = create("index", spec)
    store.create(4)  # a build killed before its manifest was written
    store.insert(np.arange(2), ["a", "b"], np.eye(2, 4, dtype=np.float32))
    with pytest.raises(DataError, match="no tttembed manifest"):
        load_index(spec)


@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_cli_index_search_learn(kind, tmp_path, minilm, faiss_setup):
    from tests.cli.test_cli import _write_beir

    data = _write_beir(tmp_path / "data", CORPUS, QUERIES, QRELS)
    spec = spec_for(kind, tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", spec])
    assert r.exit_code == 0, r.output
    assert f"indexed {len(CORPUS)} documents" in r.output
    r = runner.invoke(app, ["learn", str(data), "--index", spec, "--scorer",
                            "bm25", "--budget", "3", "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 0, r.output
    for name, extra in (("raw", []), ("adapted", ["--state", str(tmp_path / "v.npz")])):
        run = tmp_path / f"{name}.jsonl"
        r = runner.invoke(app, ["search", str(data), "--index", spec, "--top-k", "10",
                                "--out", str(run), *extra])
        assert r.exit_code == 0, r.output
        recs = [json.loads(x) for x in run.read_text().splitlines()]
        assert len(recs) == len(QUERIES) and all(len(x["results"]) == 10 for x in recs)


def test_specs_survive_path_options_and_dispatch(tmp_path):
    from pathlib import Path

    from tttembed.core.backends import known_schemes
    from tttembed.index.base import is_db_spec, repair_spec, split_collection

    assert {"milvus", "qdrant"} <= set(known_schemes("index"))
    for spec in ("milvus:http://host:19530/scifact", "qdrant:https://q.example:6333/c"):
        assert is_db_spec(Path(spec)) and repair_spec(Path(spec)) == spec
    assert split_collection("./idx.db/scifact", "milvus") == ("./idx.db", "scifact")
    assert not is_db_spec(tmp_path) and not is_db_spec("idx/scifact")
    with pytest.raises(ConfigError, match="COLLECTION"):
        split_collection("idx.db", "milvus")


@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_open_or_build_takes_a_collection_spec(kind, tmp_path, minilm):
    """What ``tttembed chain --index milvus:...`` relies on: built when absent, opened
    (not rebuilt) when it matches, refused (or, with rebuild, rebuilt) for another corpus."""
    from tttembed.index.collection import CollectionIndex
    from tttembed.index.store import open_or_build

    spec = spec_for(kind, tmp_path)
    built = open_or_build(CORPUS, spec, minilm, source="corpus-a")
    assert isinstance(built, CollectionIndex) and len(built) == len(CORPUS)
    assert built.manifest["corpus_source"] == "corpus-a"
    again = open_or_build(CORPUS, spec, minilm)
    assert again.manifest["created"] == built.manifest["created"]
    assert not (tmp_path / spec).exists()  # no folder named after the spec
    other = dict(list(CORPUS.items())[:5])
    with pytest.raises(StateMismatch, match="another corpus"):
        open_or_build(other, spec, minilm)
    rebuilt = open_or_build(other, spec, minilm, rebuild=True)
    assert len(rebuilt) == 5


@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_text_payload_is_stored_with_the_vectors(kind, tmp_path, minilm):
    from tttembed.core.backends import create
    from tttembed.data.beir import doc_text
    from tttembed.index.store import build_index, load_index

    spec = spec_for(kind, tmp_path)
    build_index(CORPUS, minilm, spec, store_text=True)
    index = load_index(spec, expected_identity=minilm.identity)
    assert index.manifest["text_payload"] is True
    store = create("index", spec)
    rows = [0, 7]
    if kind == "milvus":
        got = store.client.get(store.collection, ids=rows, output_fields=["text"])
        texts = {int(e["row"]): e["text"] for e in got}
    else:
        got = store.client.retrieve(store.collection, ids=rows, with_payload=["text"])
        texts = {int(p.id): p.payload["text"] for p in got}
    assert texts == {r: doc_text(CORPUS[index.doc_ids[r]]) for r in rows}
    with pytest.raises(ConfigError, match="keeps no document text"):
        build_index(CORPUS, minilm, tmp_path / "faiss", store_text=True)


def test_milvus_text_is_cut_at_a_character_boundary():
    from tttembed.index.milvus import _fit

    assert _fit("abc", 10) == "abc"
    assert _fit("é" * 5, 5) == "éé"  # 2 bytes each: 4 bytes kept, the split one dropped


def test_cli_index_store_text_keeps_the_text(tmp_path, minilm):
    from tttembed.core.backends import create
    from tttembed.data.beir import doc_text
    from tttembed.index.store import load_index

    spec = spec_for("qdrant", tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, **doc}) + "\n" for d, doc in CORPUS.items()))
    args = ["index", str(data), "--out", spec, "--cache-dir", str(tmp_path / "cache"),
            "--store-text", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    index = load_index(spec, expected_identity=minilm.identity)
    assert index.manifest["text_payload"] is True
    store = create("index", spec)
    (point,) = store.client.retrieve(store.collection, ids=[3], with_payload=["text"])
    assert point.payload["text"] == doc_text(CORPUS[index.doc_ids[3]])
