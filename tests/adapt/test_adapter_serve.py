"""One adapter (or neighbour) state file, served by ``serve`` and applied by
``tttembed.api.search``: identical rankings and scores, and the state changes them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from tests.serve.conftest import DOCS, QRELS, QUERIES, TASK, running  # noqa: E402

#: Unseen paraphrases of rewarded questions, and unrelated questions.
UNSEEN = ["which pet can talk like a human", "which animal lives in an aquarium tank",
          "what do rabbits like to eat", "animal that must be walked daily"]


@pytest.fixture(scope="module")
def learned(tmp_path_factory, minilm):
    import tttembed.api as tt
    from tttembed.score.qrels import QrelsScorer

    root = tmp_path_factory.mktemp("adapter-serve")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(root / "cache"))
        docs = {d: {"title": "", "text": t} for d, t in DOCS.items()}
        index = tt.index_corpus(docs, root / "index", embedder=minilm)
        rewarded = {q: QUERIES[q] for q in ("q1", "q2", "q3", "q4")}
        files = {}
        for scope in ("adapter", "neighbour"):
            state = tt.learn(index, rewarded, scorer=QrelsScorer("labels", qrels=QRELS),
                             scope=scope, budget=3, task=TASK, embedder=minilm, corpus=docs)
            files[scope] = state.save(root / f"{scope}.npz")
    return root, index, files


@pytest.mark.parametrize("scope", ["adapter", "neighbour"])
def test_one_state_file_gives_serve_and_search_the_same_rankings(learned, minilm, scope):
    import tttembed.api as tt
    from tttembed.serve import create_app

    root, index, files = learned
    texts = [*QUERIES.values(), *UNSEEN]
    app = create_app(index=str(root / "index"), states=(str(files[scope]),), embedder=minilm)
    with running(app) as url:
        resp = httpx.post(url + "/v1/search", json={"queries": texts, "task": TASK,
                                                    "k": 5}, timeout=60).json()
    qids = [f"x{i}" for i in range(len(texts))]
    run = tt.search(index, dict(zip(qids, texts)), k=5, task=TASK, embedder=minilm,
                    states=[files[scope]]).to_run()
    raw = tt.search(index, dict(zip(qids, texts)), k=5, task=TASK, embedder=minilm).to_run()
    changed = 0
    for row, qid in zip(resp["data"], qids):
        want = sorted(run[qid].items(), key=lambda kv: -kv[1])
        assert row["ids"] == [d for d, _ in want]
        np.testing.assert_allclose(row["scores"], [s for _, s in want], atol=1e-5)
        changed += not np.allclose(sorted(run[qid].values()), sorted(raw[qid].values()))
    # the state does move queries: every one (adapter), the rewarded texts (neighbour)
    assert changed >= (len(texts) if scope == "adapter" else
                       len(tt.load_state(files[scope]).keys))
