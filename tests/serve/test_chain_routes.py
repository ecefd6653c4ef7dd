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


def test_concurrent_requests_are_merged_and_answered_alike(chain_setup, chain_server):
    def ask(question: str) -> dict[str, Any]:
        r = httpx.post(f"{chain_server}/v1/chain/search", json={"question": question},
                       timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    questions = [q for _, q, _ in CHAINS] * 4
    alone = {q: ask(q)["data"] for q in questions[:len(CHAINS)]}
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, questions))
    for q, got in zip(questions, together):
        assert got["data"] == alone[q] and len(got["data"]) == 10
        assert len(got["hops"]) == 2  # the untrained encoder's T


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
