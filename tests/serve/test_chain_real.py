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


@pytest.mark.parametrize(("form", "n"), [(None, 200), ("entities", 50), ("text", 50)],
                         ids=["default-200", "entities-50", "text-50"])
def test_served_chains_equal_chain_search_on_hotpotqa_dev(tmp_path, minilm, form, n):
    """Served = offline on HotpotQA dev at the untrained encoder's default (the entity
    state) on every question, and with each state form named on 50 of them."""
    from tttembed.cli.chain import app
    from tttembed.serve import create_app

    data = shared_dataset("hotpotqa_dev200")
    out, idx = tmp_path / "run.jsonl", tmp_path / "idx"
    named = [] if form is None else ["--chain-state", form]
    res = CliRunner().invoke(app, ["search", str(data), "--index", str(idx), "--out",
                                   str(out), "--quiet", "--json", "--max-questions", str(n),
                                   *named], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    want = {r["query_id"]: [x["doc_id"] for x in r["results"]]
            for r in map(json.loads, out.read_text().splitlines())}
    chains = [json.loads(line) for line in (data / "chains_test.jsonl").read_text()
              .splitlines()][:n]
    assert len(want) == n and set(want) == {c["qid"] for c in chains}
    app_ = create_app(index=str(idx), chain="base", chain_state=form, embedder=minilm)
    with running(app_) as url:
        def ask(chain: dict) -> list[str]:
            r = httpx.post(f"{url}/v1/chain/search", json={
                "question": chain["question"], "max_hops": 2, "top_k": 100}, timeout=300)
            assert r.status_code == 200, r.text
            return [d["id"] for d in r.json()["data"]]

        with ThreadPoolExecutor(8) as pool:
            got = dict(zip((c["qid"] for c in chains), pool.map(ask, chains)))
    same = sum(got[q] == want[q] for q in want)
    assert same == n, f"{n - same} of {n} rankings differ"
