"""``POST /v1/chain/search`` (``tttembed serve --chain``): served chains equal ``tttembed
chain search``'s on a whole split, concurrent requests merged, bad input refused."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.chain.conftest import CHAINS, write_dataset
from tests.serve.conftest import running

runner = CliRunner()


@pytest.fixture(scope="module")
def chain_setup(tmp_path_factory, minilm) -> dict[str, Any]:
    """The tiny multi-hop dataset and its passage index, built as `chain search` builds it."""
    from tttembed.chain.setup import load

    root = tmp_path_factory.mktemp("chainserve")
    data = root / "tiny"
    write_dataset(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(root / "cache"))
        load(data, "test", root / "idx")
    return {"root": root, "data": data, "index": root / "idx"}


def chain_app(setup: dict[str, Any], minilm: Any, chain: str | None = "base",
              **options: Any) -> Any:
    from tttembed.serve import create_app

    return create_app(index=str(setup["index"]), chain=chain, embedder=minilm, **options)


@pytest.fixture(scope="module")
def chain_server(chain_setup, minilm):
    with running(chain_app(chain_setup, minilm)) as url:
        yield url


def offline(setup: dict[str, Any], out: Path, *args: str) -> dict[str, list[str]]:
    """`tttembed chain search --json --out` on the test split: each question's ranking."""
    from tttembed.cli.chain import app

    res = runner.invoke(app, ["search", str(setup["data"]), "--index", str(setup["index"]),
                              "--out", str(out), "--quiet", "--json", *args],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run"] == str(out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["query_id"]: [(x["doc_id"], x["score"]) for x in r["results"]] for r in rows}


@pytest.mark.parametrize(("hops", "beam"), [(2, 1), (3, 1), (3, 2)])
def test_served_chains_equal_chain_search_on_a_whole_split(chain_setup, chain_server,
                                                           tmp_path, hops, beam):
    want = offline(chain_setup, tmp_path / "run.jsonl", "--steps", str(hops),
                   "--beam", str(beam))
    assert set(want) == {qid for qid, _, _ in CHAINS}
    for qid, question, _ in CHAINS:
        r = httpx.post(f"{chain_server}/v1/chain/search",
                       json={"question": question, "max_hops": hops, "beam": beam,
                             "top_k": 12}, timeout=60)
        assert r.status_code == 200, r.text
        got = r.json()
        assert [(d["id"], d["score"]) for d in got["data"]] == want[qid]
        assert [h["id"] for h in got["hops"]] == [d for d, _ in want[qid][:hops]]
        assert got["encoder"] == "base" and got["version"] is None
        assert len(got["search_id"]) == 32


def test_a_smaller_state_token_limit_serves_as_chain_search_runs_it(chain_setup, minilm,
                                                                     tmp_path):
    want = offline(chain_setup, tmp_path / "run.jsonl", "--steps", "2",
                   "--max-seq-length", "24", "--chain-state", "text")
    default = offline(chain_setup, tmp_path / "default.jsonl", "--steps", "2",
                      "--chain-state", "text")
    assert want != default  # the limit cuts the states here
    with running(chain_app(chain_setup, minilm, chain_max_seq_length=24,
                           chain_state="text")) as url:
        for qid, question, _ in CHAINS:
            got = httpx.post(f"{url}/v1/chain/search", json={"question": question,
                                                            "top_k": 12}, timeout=60).json()
            assert [(d["id"], d["score"]) for d in got["data"]] == want[qid]


def test_the_entity_state_serves_as_chain_search_runs_it(chain_setup, minilm, tmp_path):
    """``serve --chain base`` answers each question as ``chain search`` does with the
    untrained encoder's default, the entity state (``--chain-state entities`` on both
    sides says the same); text states answer otherwise."""
    want = offline(chain_setup, tmp_path / "run.jsonl", "--steps", "3")
    assert want == offline(chain_setup, tmp_path / "e.jsonl", "--steps", "3",
                           "--chain-state", "entities")
    text = offline(chain_setup, tmp_path / "text.jsonl", "--steps", "3",
                   "--chain-state", "text")
    assert want != text  # the entity state reads other passages than the text state
    with running(chain_app(chain_setup, minilm)) as url:
        health = httpx.get(f"{url}/healthz", timeout=30).json()["chain"]
        assert (health["state"], health["max_seq_length"]) == ("entities", 128)
        for qid, question, _ in CHAINS:
            got = httpx.post(f"{url}/v1/chain/search", json={
                "question": question, "max_hops": 3, "top_k": 12}, timeout=60).json()
            assert [(d["id"], d["score"]) for d in got["data"]] == want[qid]


def test_concurrent_requests_are_merged_and_answered_alike(chain_setup, minilm):
    app = chain_app(chain_setup, minilm, max_wait_ms=20)
    worker = app.state.service.chain.worker
    with running(app) as url:
        def ask(question: str) -> dict[str, Any]:
            r = httpx.post(f"{url}/v1/chain/search", json={"question": question},
                           timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        questions = [q for _, q, _ in CHAINS] * 8
        alone = {q: ask(q)["data"] for q in questions[:len(CHAINS)]}
        assert worker.merged == 0
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(ask, questions))
    for q, got in zip(questions, together):
        assert got["data"] == alone[q] and len(got["data"]) == 10
        assert len(got["hops"]) == 2  # the untrained encoder's T
    assert worker.merged > 0 and worker.calls < len(CHAINS) + len(questions)


BAD = [
    ({"question": ""}, "question"),
    ({"question": "   "}, "question"),
    ({"question": "x" * 100_000}, "question"),
    ({"question": 3}, "question"),
    ({}, "question"),
    ({"question": "q", "max_hops": 0}, "max_hops"),
    ({"question": "q", "max_hops": 1000}, "max_hops"),
    ({"question": "q", "beam": 0}, "beam"),
    ({"question": "q", "beam": 10_000}, "beam"),
    ({"question": "q", "top_k": 13}, "top_k"),      # the index holds 12 passages
    ({"question": "q", "top_k": 0}, "top_k"),
    ({"question": "q", "top_k": True}, "top_k"),
    ({"question": "q", "version": "v9"}, "version"),
    (["q"], None),
]


@pytest.mark.parametrize(("body", "param"), BAD)
def test_bad_input_is_a_400_with_the_reason(chain_server, body, param, caplog):
    r = httpx.post(f"{chain_server}/v1/chain/search", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"]
    assert not [rec for rec in caplog.records if rec.levelname in ("ERROR", "CRITICAL")]


def test_a_body_that_is_no_json_is_a_400(chain_server):
    r = httpx.post(f"{chain_server}/v1/chain/search", content=b"{nope",
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_the_chain_route_without_chain_is_a_404_that_says_how(chain_setup, minilm):
    with running(chain_app(chain_setup, minilm, chain=None)) as url:
        r = httpx.post(f"{url}/v1/chain/search", json={"question": "q"}, timeout=60)
    assert r.status_code == 404
    assert "--chain" in r.json()["error"]["message"]


def test_chain_search_ids_take_events_and_feedback_stored_like_searches(chain_setup, minilm,
                                                                         tmp_path):
    """Clicks and labels on a chain search's final list are stored as a search's are;
    a refused request logs nothing; the state learner learns nothing from them today."""
    from tttembed.chain.traffic import logged_chain
    from tttembed.loop.open import open_store
    from tttembed.loop.pending import PendingQueue, Traffic
    from tttembed.loop.rewarded import collect
    from tttembed.loop.rows import CHAIN_TASK, START

    app = chain_app(chain_setup, minilm, registry=str(tmp_path / "reg"), registry_poll_s=0.1)
    question = CHAINS[0][1]
    with running(app) as url:
        for body in ({"question": ""}, {"question": question, "beam": 0}):
            assert httpx.post(f"{url}/v1/chain/search", json=body).status_code == 400
        got = httpx.post(f"{url}/v1/chain/search", json={"question": question, "top_k": 3},
                         timeout=60).json()
        sid, shown = got["search_id"], [d["id"] for d in got["data"]]
        unshown = next(d for d in (f"p{i}" for i in range(1, 13)) if d not in shown)
        click = {"search_id": sid, "doc_id": shown[1], "type": "click", "session_id": "s1"}
        r = httpx.post(f"{url}/v1/events", json=click)
        assert r.status_code == 202 and r.json()["stored"] == 1, r.text
        r = httpx.post(f"{url}/v1/events", json={**click, "doc_id": unshown})
        assert r.status_code == 422 and r.json()["error"]["code"] == "doc_not_shown"
        r = httpx.post(f"{url}/v1/feedback", json={"search_id": sid, "doc_id": shown[0],
                                                   "label": 1})
        assert r.status_code == 202 and r.json()["stored"] == 1, r.text
    store = open_store(None, tmp_path / "reg")
    try:
        [logged] = store.searches()  # the two refused requests logged nothing
        assert (logged.search_id, logged.task, logged.query, logged.kind) == \
            (sid, CHAIN_TASK, question, f"chain:{len(got['hops'])}:128:entities")
        # the hops the chain ran and the state token limit: what rebuilding its states needs
        assert logged_chain(logged.kind) is not None and len(got["hops"]) == 2
        assert logged_chain("chain") is None  # a search logged before: readable, no hops
        assert list(logged.ids) == shown
        [event] = store.events_after(START)
        assert (event.doc_id, event.task, event.rank) == (shown[1], CHAIN_TASK, 2)
        [label] = store.feedback()
        assert (label.task, label.query, label.doc_id) == (CHAIN_TASK, question, shown[0])
        # what the state learner takes from them today: nothing
        rewards, _, n_labels, _ = collect(store)
        assert rewards == {} and n_labels == 0
        queue = PendingQueue(depth=10)
        Traffic(store, queue, lambda s: s.ids).update()
        assert queue.sizes()["queries"] == 0
        assert store.shown_after(START) == []
    finally:
        store.close()
