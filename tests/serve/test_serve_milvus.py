"""``tttembed serve`` over a Milvus Lite collection (``--index milvus:FILE/COLLECTION``):
adapted search served from the collection ranks as ``tttembed.api.search`` ranks over the
FAISS folder of the same documents, with states learned on that folder (same corpus
fingerprint, so they are accepted without ``--allow-foreign-state``)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.serve.conftest import QUERIES, TASK, running

pytest.importorskip("pymilvus", reason="extra tttembed[milvus] not installed")
pytest.importorskip("milvus_lite", reason="milvus-lite not installed")


@pytest.fixture(scope="module")
def milvus_spec(setup, minilm) -> str:
    from tttembed.index.store import build_index

    spec = f"milvus:{setup['root']}/serve-milvus.db/pets"
    build_index(setup["docs"], minilm, spec)
    return spec


def test_serve_adapted_search_from_a_milvus_collection(setup, minilm, milvus_spec):
    import tttembed.api as tt

    want = tt.search(setup["index"], dict(QUERIES), k=5, task=TASK, embedder=minilm,
                     states=[setup["task"], setup["query"]]).to_run()
    from tttembed.serve import create_app

    app = create_app(index=milvus_spec, states=(str(setup["task"]), str(setup["query"])),
                     queries=(str(setup["queries"]),), embedder=minilm)
    with running(app) as url:
        health = httpx.get(url + "/healthz")
        resp = httpx.post(url + "/v1/search", json={"queries": list(QUERIES.values()),
                                                    "task": TASK, "k": 5})
    assert resp.status_code == 200, resp.text
    assert health.status_code == 200
    for row, qid in zip(resp.json()["data"], QUERIES):
        ranked = sorted(want[qid].items(), key=lambda kv: -kv[1])
        assert row["ids"] == [d for d, _ in ranked]
        np.testing.assert_allclose(row["scores"], [s for _, s in ranked], atol=1e-5)


def test_serve_refuses_a_state_of_another_corpus_on_a_collection(setup, minilm, tmp_path):
    from tttembed.core.errors import StateMismatch
    from tttembed.index.store import build_index
    from tttembed.serve import create_app

    other = {d: dict(v) for d, v in list(setup["docs"].items())[:6]}
    spec = f"milvus:{tmp_path}/other.db/pets"
    build_index(other, minilm, spec)
    with pytest.raises(StateMismatch):
        create_app(index=spec, states=(str(setup["task"]),), embedder=minilm)
