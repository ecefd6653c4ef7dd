"""issue 65 item 4 and issue 64's trust round 5: a server error that is not a bug in the
request is never a 500 with a traceback per request. A store that refuses a row answers
503 ``store_refused`` with the store's reason in one log line; an upstream embedder that
fails answers 502 ``upstream_failed``; a click posted to a replica while the search it
names is not written yet (held by the replica that answered it) answers a retryable 503,
and is stored when retried after the search is written."""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import TASK
from tttembed.core.errors import BackendError

pytest.importorskip("starlette")


class _Failing:
    """The index's embedder, failing as an upstream endpoint does on a query with "boom"."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def encode(self, texts: Any, kind: str = "document", progress: Any = None) -> Any:
        if any("boom" in t for t in texts):
            raise BackendError("POST http://127.0.0.1:9/v1/embeddings returned HTTP 503: "
                               "overloaded (after 5 retries)")
        return self._inner.encode(texts, kind)


def _app(setup: dict[str, Any], embedder: Any, registry: Path | None = None) -> Any:
    from starlette.testclient import TestClient

    from tttembed.serve import create_app

    extra = {} if registry is None else {"registry": str(registry)}
    return TestClient(create_app(index=str(setup["root"] / "index"), embedder=embedder,
                                 **extra))


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_upstream_embedder_failure_is_a_502_in_one_log_line(setup, minilm, caplog):
    caplog.set_level(logging.INFO, "tttembed")
    with _app(setup, _Failing(minilm)) as client:
        answers = [client.post(path, json=body) for path, body in (
            ("/v1/search", {"query": "boom one", "task": TASK}),
            ("/v1/search", {"query": "boom two", "task": TASK}),
            (f"/t/{TASK}/v1/embeddings", {"input": "boom three"}))]
        fine = client.post("/v1/search", json={"query": "a cat", "task": TASK})
    assert [r.status_code for r in answers] == [502, 502, 502], answers[0].text
    error = answers[0].json()["error"]
    assert error["code"] == "upstream_failed" and "HTTP 503: overloaded" in error["message"]
    assert fine.status_code == 200
    logged = _errors(caplog)
    assert len(logged) == 1 and not any(r.exc_info for r in logged), logged
    assert "HTTP 503" in logged[0].getMessage()


def test_a_store_that_refuses_a_row_is_a_503_naming_why(setup, minilm, tmp_path, caplog):
    caplog.set_level(logging.INFO, "tttembed")
    with _app(setup, minilm, tmp_path / "reg") as client:
        sid = client.post("/v1/search", json={"query": "a cat", "task": TASK}
                          ).json()["data"][0]["search_id"]
        db = sqlite3.connect(tmp_path / "reg" / "loop.sqlite")
        db.execute("CREATE TRIGGER no_labels BEFORE INSERT ON feedback BEGIN "
                   "SELECT RAISE(ABORT, 'labels are closed'); END")
        db.commit()
        db.close()
        answers = [client.post("/v1/feedback", json={"search_id": sid, "doc_id": "d1",
                                                     "label": 1}) for _ in range(3)]
    assert {r.status_code for r in answers} == {503}, answers[0].text
    error = answers[0].json()["error"]
    assert error["code"] == "store_refused" and "labels are closed" in error["message"]
    logged = _errors(caplog)
    assert len(logged) == 1 and not any(r.exc_info for r in logged), logged


def test_a_click_on_a_search_not_written_yet_is_a_retryable_503(setup, minilm, tmp_path,
                                                                monkeypatch):
    """Replica A answers a search whose log write fails (held in memory); a click on it
    posted to replica B meanwhile was a 404 (lost); now a 503 with Retry-After, and the
    same click retried once A has written the search is stored."""
    from tttembed.loop.sqlite import SQLiteStore

    reg = tmp_path / "reg"
    real = SQLiteStore.log_searches
    failing = {"on": True}

    def flaky(self: Any, rows: Any) -> None:
        if failing["on"]:
            raise sqlite3.OperationalError("disk I/O error")
        real(self, rows)

    monkeypatch.setattr(SQLiteStore, "log_searches", flaky)
    with _app(setup, minilm, reg) as a, _app(setup, minilm, reg) as b:
        hit = a.post("/v1/search", json={"query": "a cat", "task": TASK}).json()["data"][0]
        click = {"events": [{"type": "click", "search_id": hit["search_id"],
                             "doc_id": hit["ids"][0], "session_id": "u1"}]}
        early = b.post("/v1/events", json=click)
        assert early.status_code == 503, early.text
        assert early.headers["Retry-After"] == "1"
        failing["on"] = False  # the store answers again: A's timer writes what it holds
        deadline = time.monotonic() + 30
        late = b.post("/v1/events", json=click)
        while late.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)  # the client retries, as Retry-After says
            late = b.post("/v1/events", json=click)
    assert late.status_code == 202 and late.json()["stored"] == 1, late.text
    bogus = {"events": [{"type": "click", "search_id": "0" * 32, "doc_id": "d1",
                         "session_id": "u1"}]}
    with _app(setup, minilm, reg) as c:
        assert c.post("/v1/events", json=bogus).status_code == 404  # an old or foreign id



class _Hung(_Failing):
    """The upstream embedder timing out as the HTTP client reports it (its hint included)."""

    def encode(self, texts: Any, kind: str = "document", progress: Any = None) -> Any:
        from tttembed.core.http import SLOW_HINT

        if not any("hang" in t for t in texts):
            return self._inner.encode(texts, kind)
        raise BackendError("POST http://127.0.0.1:9/v1/embeddings failed after 6 attempts; "
                           f"last error: timed out ({SLOW_HINT})")


def test_a_hung_upstreams_502_names_no_option_serve_lacks(setup, minilm):
    """Trust round 6 (issue 77, g): the 502 said to raise --timeout / --max-retries,
    which `tttembed serve` does not have; it names the fixed bounds and what to check."""
    with _app(setup, _Hung(minilm)) as client:
        answer = client.post("/v1/search", json={"query": "hang here", "task": TASK})
    message = answer.json()["error"]["message"]
    assert answer.status_code == 502 and "--timeout" not in message, message
    assert "--max-retries" not in message and "upstream embedder" in message
    # serve's own bound (--upstream-deadline, default 30 s), not the client default 210 s
    assert "waits at most 30 s an attempt and 30 s a request" in message
    assert "(--upstream-deadline sets the second)" in message


def test_serve_bounds_an_http_embedders_wait_by_its_upstream_deadline():
    """Trust round 6: a hung upstream embedder held each search 210 s (the HTTP client's
    default) before the 502; ``serve --upstream-deadline S`` gives the index's HTTP
    embedder a policy whose whole request (attempts and waits) ends within S."""
    from types import SimpleNamespace

    from tttembed.serve.service import Service

    def upstream(spec: str, deadline: float) -> dict:
        me = SimpleNamespace(index=SimpleNamespace(manifest={"embedder_spec": spec}),
                             config=SimpleNamespace(upstream_deadline_s=deadline))
        return Service._upstream(me)  # type: ignore[arg-type]

    policy = upstream("openai:m@http://127.0.0.1:9/v1", 2.0)["retry"]
    assert policy.total_deadline == 2.0 and policy.timeout == 2.0
    assert policy.max_delay <= 0.5  # no backoff wait past a quarter of the deadline
    assert upstream("openai:m@http://127.0.0.1:9/v1", 30.0)["retry"].timeout == 30.0
    assert upstream("st:sentence-transformers/all-MiniLM-L6-v2", 2.0) == {}  # local model
