"""A served chain search's states, rebuilt from its answer, equal the texts the server
encoded, token for token; a chain whose passage left the index is one line."""

# ruff: noqa: F811  (the fixtures imported from the serve tests)
from __future__ import annotations

import dataclasses

import httpx
import pytest

from tests.chain.conftest import CHAINS
from tests.serve.conftest import running
from tests.serve.test_chain_routes import chain_app, chain_setup  # noqa: F401
from tttembed.core.errors import DataError


@pytest.mark.parametrize("limit", [256, 24])
def test_rebuilt_states_equal_the_served_ones_token_for_token(chain_setup, minilm, limit):
    from tttembed.chain.states import TokenBudget
    from tttembed.chain.traffic import hop_rows, served_states

    app = chain_app(chain_setup, minilm, chain_max_seq_length=limit, chain_state="text")
    source = app.state.service.chain.source
    seen: list[list[str]] = []
    inner = source.current.encode

    def recording(texts):
        seen.append(list(texts))
        return inner(texts)

    source.current = dataclasses.replace(source.current, encode=recording)
    worker = app.state.service.chain.worker
    index = app.state.service.index
    row_of = {d: i for i, d in enumerate(index.doc_ids)}
    tok = minilm.model.tokenizer
    with running(app) as url:
        for _, question, _ in CHAINS:
            seen.clear()
            got = httpx.post(f"{url}/v1/chain/search",
                             json={"question": question, "max_hops": 3}, timeout=60).json()
            served = [batch[0] for batch in seen]          # one question per batch here
            rows = hop_rows([h["id"] for h in got["hops"]], row_of, got["search_id"])
            rebuilt = served_states(question, rows, worker.passages,
                                    TokenBudget.for_model(minilm.model, limit))
            assert rebuilt == served and len(served) == 3
            assert [tok(t)["input_ids"] for t in rebuilt] == \
                [tok(t)["input_ids"] for t in served]


def test_a_chain_whose_passage_left_the_index_is_one_line():
    from tttembed.chain.traffic import hop_rows

    with pytest.raises(DataError) as err:
        hop_rows(["p1", "gone"], {"p1": 0}, "abc123")
    message = str(err.value)
    assert "\n" not in message and "abc123" in message and "'gone'" in message
    assert "no longer in the index" in message and "skip this search" in message
