"""What one chain request may ask for: the work is bounded (said in the 400), a number sent
as a string is refused as a string, and ``/healthz`` shows the state token limit in use."""

# ruff: noqa: F811  (the fixtures imported from the chain route tests)
from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import running
from tests.serve.test_chain_routes import chain_app, chain_server, chain_setup  # noqa: F401


@pytest.mark.parametrize(("body", "states"), [
    ({"max_hops": 10, "beam": 16}, 145),
    ({"max_hops": 10, "beam": 5}, 46),
])
def test_a_request_that_asks_for_too_much_work_is_a_400_that_says_the_limit(
        chain_server, body, states):
    r = httpx.post(f"{chain_server}/v1/chain/search", json={"question": "q", **body},
                   timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "chain_too_costly"
    assert f"{states} state encodings" in error["message"]
    assert "at most 40" in error["message"] and "lower max_hops or beam" in error["message"]


def test_the_largest_affordable_request_is_answered(chain_server):
    r = httpx.post(f"{chain_server}/v1/chain/search",
                   json={"question": "Who founded Orchid College?", "max_hops": 10,
                         "beam": 4}, timeout=120)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("value", "kind"), [("3", "not a string"), (2.5, "fraction"),
                                             (True, "not a boolean"), (None, "not null")])
def test_max_hops_of_another_type_says_it_must_be_an_integer(chain_server, value, kind):
    r = httpx.post(f"{chain_server}/v1/chain/search",
                   json={"question": "q", "max_hops": value}, timeout=60)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "must be an integer" in message and kind in message, message
    assert "got 3" not in message or "got \"3\"" in message


def test_healthz_shows_the_state_token_limit_in_use(chain_setup, minilm):
    with running(chain_app(chain_setup, minilm, chain_max_seq_length=24)) as url:
        chain = httpx.get(f"{url}/healthz", timeout=30).json()["chain"]
    assert chain["max_seq_length"] == 24
