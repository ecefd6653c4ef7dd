"""Served chains equal `tttembed chain search` on a whole real split (HotpotQA dev, 200
questions over 1,971 passages): slow (the passage index is built first), run with
``-m slow``; skipped where ../shared/data lacks the set."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import shared_dataset
from tests.serve.conftest import running

pytestmark = pytest.mark.slow


def test_served_chains_equal_chain_search_on_hotpotqa_dev(tmp_path, minilm):
    from tttembed.cli.chain import app
    from tttembed.serve import create_app

    data = shared_dataset("hotpotqa_dev200")
    out, idx = tmp_path / "run.jsonl", tmp_path / "idx"
    res = CliRunner().invoke(app, ["search", str(data), "--index", str(idx), "--out",
                                   str(out), "--quiet", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    want = {r["query_id"]: [x["doc_id"] for x in r["results"]]
            for r in map(json.loads, out.read_text().splitlines())}
    chains = [json.loads(line) for line in (data / "chains_test.jsonl").read_text()
              .splitlines()]
    assert len(chains) == len(want) == 200
    with running(create_app(index=str(idx), chain="base", embedder=minilm)) as url:
        def ask(chain: dict) -> list[str]:
            r = httpx.post(f"{url}/v1/chain/search", json={
                "question": chain["question"], "max_hops": 2, "top_k": 100}, timeout=300)
            assert r.status_code == 200, r.text
            return [d["id"] for d in r.json()["data"]]

        with ThreadPoolExecutor(8) as pool:
            got = dict(zip((c["qid"] for c in chains), pool.map(ask, chains)))
    same = sum(got[q] == want[q] for q in want)
    assert same == len(want), f"{len(want) - same} of {len(want)} rankings differ"


def test_served_entity_chains_equal_chain_search_on_50_hotpotqa_questions(tmp_path, minilm):
    """The entity state (``--chain-state entities``), served = offline on 50 questions."""
    from tttembed.cli.chain import app
    from tttembed.serve import create_app

    data = shared_dataset("hotpotqa_dev200")
    out, idx = tmp_path / "run.jsonl", tmp_path / "idx"
    res = CliRunner().invoke(app, ["search", str(data), "--index", str(idx), "--out",
                                   str(out), "--quiet", "--json", "--max-questions", "50",
                                   "--chain-state", "entities"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    want = {r["query_id"]: [x["doc_id"] for x in r["results"]]
            for r in map(json.loads, out.read_text().splitlines())}
    chains = [json.loads(line) for line in (data / "chains_test.jsonl").read_text()
              .splitlines()][:50]
    assert len(want) == 50 and set(want) == {c["qid"] for c in chains}
    app_ = create_app(index=str(idx), chain="base", chain_state="entities", embedder=minilm)
    with running(app_) as url:
        def ask(chain: dict) -> list[str]:
            r = httpx.post(f"{url}/v1/chain/search", json={
                "question": chain["question"], "max_hops": 2, "top_k": 100}, timeout=300)
            assert r.status_code == 200, r.text
            return [d["id"] for d in r.json()["data"]]

        with ThreadPoolExecutor(8) as pool:
            got = dict(zip((c["qid"] for c in chains), pool.map(ask, chains)))
    same = sum(got[q] == want[q] for q in want)
    assert same == 50, f"{50 - same} of 50 rankings differ"
