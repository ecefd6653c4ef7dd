"""Client-made mistakes on the serving proxy are 4xx in OpenAI's error shape, never a 500,
and nothing a client sends is logged as a server traceback."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from tests.serve.conftest import TASK, make_app, running, setup  # noqa: E402, F401


@pytest.mark.parametrize("path, content, message", [
    ("/v1/embeddings", b'{"input": "\\ud800 a lone surrogate"}', "lone surrogate"),
    (f"/t/{TASK}/v1/embeddings", b'{"input": ["ok", "\\udfff"]}', "input[1]"),
    ("/v1/search", b'{"query": "\\ud83d", "task": "_"}', "lone surrogate"),
    ("/v1/embeddings", b"[" * 100000 + b"]" * 100000, "nested too deeply"),
], ids=["surrogate-embeddings", "surrogate-task", "surrogate-search", "deep-nesting"])
def test_client_made_bodies_are_400_not_500(setup, minilm, caplog, path, content,  # noqa: F811
                                            message):
    """A lone surrogate in the input (valid JSON, invalid Unicode) and a body nested
    100,000 levels deep are 400s with a message saying why; no server traceback is logged."""
    with caplog.at_level(logging.ERROR, logger="tttembed.serve"):
        with running(make_app(setup, minilm)) as url:
            r = httpx.post(url + path, content=content,
                           headers={"content-type": "application/json"}, timeout=60)
            assert r.status_code == 400, r.text[:300]
            err = r.json()["error"]
            assert message in err["message"] and err["type"], err
            assert httpx.get(url + "/healthz").status_code == 200  # still serving
    assert not [rec for rec in caplog.records if rec.exc_info], caplog.text[:500]


def test_an_unknown_task_is_a_404_listing_the_known_ones(setup, minilm):  # noqa: F811
    """A typo in an app's base_url (/t/TYPO/v1) no longer silently drops the task's
    adaptation: 404 in OpenAI's error shape listing the known tasks, on embeddings and
    search alike; --unknown-task global serves it with the global states, raw unadapted."""
    body = {"input": ["which pet talks like a person"], "model": "m"}
    with running(make_app(setup, minilm)) as url:
        r = httpx.post(url + "/t/petz/v1/embeddings", json=body)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "unknown_task" and TASK in err["message"]
        assert "--unknown-task" in err["message"]
        r = httpx.post(url + "/v1/search", json={"query": "a pet", "task": "petz"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_task"
        known = httpx.post(url + f"/t/{TASK}/v1/embeddings", json=body)
        raw = httpx.post(url + "/t/_/v1/embeddings", json=body)
        assert known.status_code == raw.status_code == 200
    for policy, expected in (("global", raw), ("raw", raw)):
        with running(make_app(setup, minilm, unknown_task=policy)) as url:
            r = httpx.post(url + "/t/petz/v1/embeddings", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["data"][0]["embedding"] == pytest.approx(
                expected.json()["data"][0]["embedding"], abs=1e-6)
    assert known.json()["data"][0]["embedding"] != pytest.approx(
        raw.json()["data"][0]["embedding"], abs=1e-6)  # the task's state does move it


BODIES = {"/v1/embeddings": b'{"input": "cats"}', f"/t/{TASK}/v1/embeddings": b'{"input": "cats"}',
          "/v1/search": b'{"query": "cats", "task": "' + TASK.encode() + b'"}'}


def test_a_body_that_is_not_json_by_its_content_type_is_415(setup, minilm):  # noqa: F811
    """issue 59: a JSON body was read whatever its Content-Type. Every route that takes a
    body refuses a non-JSON type with a 415; JSON types (with parameters, ``+json``) and
    a missing Content-Type (as FastAPI reads it) are read as JSON."""
    with running(make_app(setup, minilm)) as url:
        for path, body in BODIES.items():
            for kind in ("text/plain", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x"):
                r = httpx.post(url + path, content=body, headers={"content-type": kind})
                assert r.status_code == 415, (path, kind, r.status_code, r.text[:200])
                err = r.json()["error"]
                assert err["code"] == "unsupported_media_type", err
                assert "application/json" in err["message"] and kind in err["message"]
        for kind in ("application/json; charset=utf-8", "application/vnd.api+json", None):
            headers = {"content-type": kind} if kind else {}
            for path, body in BODIES.items():
                r = httpx.post(url + path, content=body, headers=headers)
                assert r.status_code == 200, (path, kind, r.text[:200])
