"""The service against uvicorn on a loopback port, called with the real ``openai`` client:
raw document vectors, adapted query vectors equal to what ``tttembed.api.search`` applies,
identical search rankings, atomic reloads, auth, errors and metrics."""

from __future__ import annotations

import base64
import json
import re
import threading

import httpx
import numpy as np
import pytest

from tests.serve.conftest import QUERIES, TASK, make_app, running, state_copy

openai = pytest.importorskip("openai")


def client(url: str, path: str = "/v1", key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + path, api_key=key, max_retries=0, timeout=60)


def vectors(resp: openai.types.CreateEmbeddingResponse) -> np.ndarray:
    return np.array([d.embedding for d in sorted(resp.data, key=lambda d: d.index)],
                    dtype=np.float32)


def expected_adapted(setup, minilm, texts, task, states, qids=None):
    """What ``tttembed.api.search`` applies: ``adapt_queries`` on its QuerySet."""
    import tttembed.api as tt
    from tttembed.ttt.queries import QuerySet
    from tttembed.ttt.search import adapt_queries

    loaded = [tt.load_state(setup[s]) for s in states]
    qs = QuerySet((task,) * len(texts), tuple(qids or [f"x{i}" for i in range(len(texts))]),
                  tuple(texts))
    return adapt_queries(minilm.encode(texts, "query"), qs, loaded)


def test_documents_are_the_embedders_vectors(server, minilm):
    texts = ["Cats sleep for most of the day.", "A second document about dogs."]
    want = minilm.encode(texts, "document")
    got = vectors(client(server).embeddings.create(input=texts, model="any"))  # base64
    np.testing.assert_allclose(got, want, atol=1e-6)
    resp = client(server).embeddings.create(input=texts[0], model="m", encoding_format="float")
    np.testing.assert_allclose(vectors(resp)[0], want[0], atol=1e-6)
    assert resp.model == "m" and resp.usage.prompt_tokens == len(texts[0].split())
    raw = httpx.post(server + "/v1/embeddings",
                     json={"input": texts, "encoding_format": "base64"}).json()
    first = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(first, want[0], atol=1e-6)


def test_task_queries_are_adapted_as_api_search_adapts(server, setup, minilm):
    texts = ["a pet that can talk", "how long do turtles live"]  # unseen: task-wise state
    got = vectors(client(server, f"/t/{TASK}/v1").embeddings.create(input=texts, model="m"))
    want = expected_adapted(setup, minilm, texts, TASK, ["task", "query"])
    np.testing.assert_allclose(got, want, atol=1e-6)
    raw = minilm.encode(texts, "query")
    assert np.abs(got - raw).max() > 1e-3  # the state really moved them
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # "_" = global states only (there is none): raw query vectors
    glob = vectors(client(server, "/t/_/v1").embeddings.create(input=texts, model="m"))
    np.testing.assert_allclose(glob, raw, atol=1e-6)
    # the extension fields on /v1/embeddings do the same as the task route
    ext = client(server).embeddings.create(input=texts, model="m",
                                           extra_body={"input_type": "query", "task": TASK})
    np.testing.assert_allclose(vectors(ext), want, atol=1e-6)


def test_large_requests_take_the_worker_thread_path_with_the_same_vectors(server, setup,
                                                                          minilm):
    from tttembed.serve.routes import INLINE_TEXTS

    texts = [f"question {i} about a pet that can talk" for i in range(INLINE_TEXTS + 3)]
    want = expected_adapted(setup, minilm, texts, TASK, ["task", "query"])
    big = vectors(client(server, f"/t/{TASK}/v1").embeddings.create(input=texts, model="m"))
    np.testing.assert_allclose(big, want, atol=1e-6)
    few = vectors(client(server, f"/t/{TASK}/v1").embeddings.create(input=texts[:2],
                                                                    model="m"))
    np.testing.assert_allclose(few, want[:2], atol=1e-6)


def test_query_wise_state_applies_by_exact_text(server, setup, minilm):
    from tttembed.api import load_state

    query_state = load_state(setup["query"])
    learned = [k.split("/", 1)[1] for k in query_state.names]
    texts = [QUERIES[q] for q in learned] + [QUERIES[learned[0]] + "?"]
    qids = learned + ["unknown"]
    got = vectors(client(server, f"/t/{TASK}/v1").embeddings.create(input=texts, model="m"))
    want = expected_adapted(setup, minilm, texts, TASK, ["task", "query"], qids)
    np.testing.assert_allclose(got, want, atol=1e-6)
    task_only = expected_adapted(setup, minilm, texts, TASK, ["task"], qids)
    assert np.abs(got[0] - task_only[0]).max() > 1e-4  # query-wise won for exact text
    np.testing.assert_allclose(got[-1], task_only[-1], atol=1e-6)  # not for another text
    listed = httpx.get(server + "/v1/states").json()["data"]
    assert [s["scope"] for s in listed] == ["task", "query"]
    assert f"one of its {len(learned)} queries" in listed[1]["applies_to"]


def test_search_rankings_equal_api_search(server, setup, minilm):
    import tttembed.api as tt

    result = tt.search(setup["index"], dict(QUERIES), k=5, task=TASK, embedder=minilm,
                       states=[setup["task"], setup["query"]])
    resp = httpx.post(server + "/v1/search", json={"queries": list(QUERIES.values()),
                                                   "task": TASK, "k": 5}).json()
    run = result.to_run()
    for row, qid in zip(resp["data"], QUERIES):
        want = sorted(run[qid].items(), key=lambda kv: -kv[1])
        assert row["ids"] == [d for d, _ in want]
        np.testing.assert_allclose(row["scores"], [s for _, s in want], atol=1e-5)
    one = httpx.post(server + "/v1/search", json={"query": QUERIES["q3"], "task": TASK,
                                                  "k": 2}).json()
    assert one["data"][0]["ids"] == resp["data"][2]["ids"][:2]


def test_reload_swaps_and_refuses_broken_files(setup, minilm, tmp_path):
    live = tmp_path / "live.npz"
    state_copy(setup, "task", live)
    text = ["which animal sings in the morning"]
    with running(make_app(setup, minilm, states=(str(live),))) as url:
        api = client(url, f"/t/{TASK}/v1")
        before = vectors(api.embeddings.create(input=text, model="m"))
        state_copy(setup, "other", live)
        ok = httpx.post(url + "/admin/reload")
        assert ok.status_code == 200 and ok.json()["generation"] == 2
        after = vectors(api.embeddings.create(input=text, model="m"))
        np.testing.assert_allclose(after, expected_adapted(setup, minilm, text, TASK,
                                                           ["other"]), atol=1e-6)
        assert np.abs(after - before).max() > 1e-4
        live.write_bytes(b"not a state file")
        bad = httpx.post(url + "/admin/reload")
        assert bad.status_code == 422
        err = bad.json()["error"]
        assert err["code"] == "reload_refused" and "not a readable state file" in err["message"]
        kept = vectors(api.embeddings.create(input=text, model="m"))
        np.testing.assert_allclose(kept, after, atol=0)
        states = httpx.get(url + "/v1/states").json()
        assert states["generation"] == 2 and states["last_reload"]["ok"] is False
        assert "not a readable state file" in states["last_reload"]["error"]
        metrics = httpx.get(url + "/metrics").text
        assert 'tttembed_reloads_total{result="refused"} 1' in metrics
        assert 'tttembed_reloads_total{result="ok"} 1' in metrics


def test_no_request_sees_a_mix_of_states(setup, minilm, tmp_path):
    """Requests in flight while two state files swap between two versions: every
    response is wholly one version (its generation says which)."""
    live_t, live_q = tmp_path / "t.npz", tmp_path / "q.npz"
    texts = [QUERIES["q1"], "which animal sings in the morning"]
    versions = {}
    for name, (t, q) in {"a": ("task", "query"), "b": ("other", "query")}.items():
        versions[name] = expected_adapted(setup, minilm, texts, TASK, [t, q], ["q1", "x"])
    state_copy(setup, "task", live_t)
    state_copy(setup, "query", live_q)
    seen, problems = [], []
    with running(make_app(setup, minilm, states=(str(live_t), str(live_q)))) as url:
        def hammer() -> None:
            with httpx.Client(base_url=url) as http:
                for _ in range(15):
                    r = http.post(f"/t/{TASK}/v1/embeddings",
                                  json={"input": texts, "encoding_format": "float"})
                    if r.status_code != 200:
                        problems.append(r.status_code)
                        continue
                    got = np.array([d["embedding"] for d in r.json()["data"]], np.float32)
                    match = [n for n, v in versions.items() if np.abs(got - v).max() < 1e-6]
                    seen.append(match[0] if len(match) == 1 else "mixed")
        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for i in range(6):
            state_copy(setup, "other" if i % 2 == 0 else "task", live_t)
            assert httpx.post(url + "/admin/reload").status_code == 200
        for t in threads:
            t.join()
    assert not problems and len(seen) == 60
    assert "mixed" not in seen and set(seen) <= {"a", "b"}


def test_bearer_key_guards_every_route_but_healthz(setup, minilm, monkeypatch):
    monkeypatch.setenv("TTT_TEST_KEY", "s3cret-key")
    with running(make_app(setup, minilm, api_key_env="TTT_TEST_KEY")) as url:
        assert httpx.get(url + "/healthz").status_code == 200
        for method, path in (("GET", "/metrics"), ("GET", "/v1/states"),
                             ("POST", "/v1/embeddings"), ("POST", f"/t/{TASK}/v1/embeddings"),
                             ("POST", "/v1/search"), ("POST", "/admin/reload")):
            r = httpx.request(method, url + path, json={"input": "x"})
            assert r.status_code == 401, path
            assert r.json()["error"]["code"] == "invalid_api_key"
            wrong = httpx.request(method, url + path, json={"input": "x"},
                                  headers={"Authorization": "Bearer s3cret-kez"})
            assert wrong.status_code == 401, path
        with pytest.raises(openai.AuthenticationError):
            client(url, key="wrong").embeddings.create(input="x", model="m")
        good = client(url, key="s3cret-key").embeddings.create(input="x", model="m")
        assert len(good.data[0].embedding) == 384


BAD = [
    ("/v1/embeddings", {"model": "m"}, 400, "missing_input"),
    ("/v1/embeddings", {"input": []}, 400, "invalid_input"),
    ("/v1/embeddings", {"input": ["ok", ""]}, 400, "invalid_input"),
    ("/v1/embeddings", {"input": [[1, 2, 3]]}, 400, "unsupported_input"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 400,
     "invalid_encoding_format"),
    ("/v1/embeddings", {"input": "x", "dimensions": 12}, 400, "invalid_dimensions"),
    ("/v1/embeddings", {"input": "x", "input_type": "passage"}, 400, "invalid_input_type"),
    ("/v1/embeddings", {"input": "x", "task": TASK}, 400, "invalid_task"),
    ("/v1/embeddings", ["x"], 400, "invalid_body"),
    ("/v1/embeddings", {"input": ["x"] * 3000}, 400, "too_many_inputs"),
    (f"/t/{TASK}/v1/embeddings", {"input": "x", "input_type": "document"}, 400,
     "invalid_input_type"),
    ("/v1/search", {"query": "x", "k": 0}, 400, "invalid_k"),
    ("/v1/search", {"query": "x", "queries": ["y"]}, 400, "invalid_input"),
    ("/v1/search", {"query": 3}, 400, "invalid_input"),
    ("/v1/embeddings", {"input": "x" * 3_000_000}, 413, "request_too_large"),
]


def test_bad_input_gets_openai_shaped_4xx(server):
    for path, body, status, code in BAD:
        r = httpx.post(server + path, json=body)
        assert r.status_code == status, (path, body, r.text[:200])
        err = r.json()["error"]
        assert err["code"] == code and err["message"] and err["type"], (path, body)
    r = httpx.post(server + "/v1/embeddings", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert httpx.get(server + "/nowhere").json()["error"]["code"] == "not_found"
    assert httpx.get(server + "/v1/embeddings").status_code == 405
    with pytest.raises(openai.BadRequestError):
        client(server).embeddings.create(input=[], model="m")


def test_metrics_count_requests_hits_and_errors(setup, minilm):
    with running(make_app(setup, minilm)) as url:
        api = client(url, f"/t/{TASK}/v1")
        for _ in range(3):
            api.embeddings.create(input=["x one", "x two"], model="m")
        httpx.post(url + "/v1/embeddings", json={"input": []})
        text = httpx.get(url + "/metrics").text

    def value(name: str) -> float:
        m = re.search(re.escape(name) + r" (\S+)", text)
        assert m, name
        return float(m.group(1))

    assert value('tttembed_requests_total{method="POST",route="task_embeddings",'
                 'status="200"}') == 3
    assert value('tttembed_request_seconds_count{route="task_embeddings"}') == 3
    assert value('tttembed_inputs_total{route="embeddings"}') == 6
    assert value(f'tttembed_state_hits_total{{state="{setup["task"]}"}}') == 6
    assert value('tttembed_errors_total{route="embeddings",type="invalid_input"}') == 1
    assert text.count("# TYPE") == 7


def test_langchain_query_side_switch(server, setup, minilm):
    lc = pytest.importorskip("langchain_openai")
    texts = ["a pet that can talk"]
    common = dict(model="any", api_key="unused", check_embedding_ctx_length=False,
                  max_retries=0)
    query_side = lc.OpenAIEmbeddings(base_url=f"{server}/t/{TASK}/v1", **common)
    doc_side = lc.OpenAIEmbeddings(base_url=f"{server}/v1", **common)
    want = expected_adapted(setup, minilm, texts, TASK, ["task", "query"])
    np.testing.assert_allclose(query_side.embed_query(texts[0]), want[0], atol=1e-6)
    np.testing.assert_allclose(doc_side.embed_documents(texts),
                               minilm.encode(texts, "document"), atol=1e-6)



def test_shutdown_lets_in_flight_requests_finish(setup, minilm):
    """A request waiting for the model when shutdown starts still gets its answer."""
    app = make_app(setup, minilm)
    batcher = app.state.service.engine.encoder.batcher
    out: dict[str, httpx.Response] = {}
    with running(app) as url:
        with batcher._busy:  # the model is busy: the request waits in flight
            t = threading.Thread(target=lambda: out.update(r=httpx.post(
                url + "/v1/embeddings", json={"input": "an in-flight text"}, timeout=60)))
            t.start()
            for _ in range(3000):
                if batcher._queue:
                    break
                threading.Event().wait(0.01)
            assert batcher._queue  # it is in flight
            app.state.uvicorn.should_exit = True  # shutdown begins while it waits
            for _ in range(3000):  # until the listening socket is closed
                try:
                    httpx.get(url + "/healthz", timeout=5)
                except httpx.TransportError:
                    break
                threading.Event().wait(0.01)
            else:
                raise AssertionError("the server kept accepting connections")
        t.join(60)
    assert out["r"].status_code == 200
    np.testing.assert_allclose(out["r"].json()["data"][0]["embedding"],
                               minilm.encode(["an in-flight text"], "document")[0], atol=1e-6)


def test_a_method_auto_state_is_served_as_search_applies_it(setup, minilm, tmp_path):
    """A mixed state (``learn --method auto``: the task part and the query part in one
    file) through the server: embeddings and rankings equal ``tttembed.api.search``'s
    with the same file, and a rewarded text gets its own vector, not the task's."""
    import numpy as np

    import tttembed.api as tt
    from tttembed.adapt.state import AdaptState

    task, query = tt.load_state(setup["task"]), tt.load_state(setup["query"])
    mixed = AdaptState("mixed", task.keys + query.keys,
                       np.concatenate([task.vectors, query.vectors]),
                       np.concatenate([task.alpha, query.alpha]),
                       np.concatenate([task.n_g, query.n_g]), identity=task.identity,
                       dim=task.dim, corpus_fingerprint=task.corpus_fingerprint,
                       method="auto", selection={"choice": {TASK: "task+query"}})
    path = mixed.save(tmp_path / "auto.npz")
    texts = [QUERIES["q1"], "a pet that can talk"]  # rewarded (query part), unseen (task)
    with running(make_app(setup, minilm, states=(str(path),))) as url:
        got = vectors(client(url, f"/t/{TASK}/v1").embeddings.create(input=texts, model="m"))
        resp = httpx.post(url + "/v1/search", json={"queries": texts, "task": TASK,
                                                    "k": 5}).json()
        listed = httpx.get(url + "/v1/states").json()["data"]
    want = expected_adapted(setup, minilm, texts, TASK, ["query", "task"])
    np.testing.assert_allclose(got, want, atol=1e-6)
    task_only = expected_adapted(setup, minilm, texts, TASK, ["task"])
    assert np.abs(got[0] - task_only[0]).max() > 1e-4
    np.testing.assert_allclose(got[1], task_only[1], atol=1e-6)
    result = tt.search(setup["index"], {"a": texts[0], "b": texts[1]}, k=5, task=TASK,
                       embedder=minilm, states=[path])
    run = result.to_run()
    for row, qid in zip(resp["data"], ("a", "b")):
        assert row["ids"] == [d for d, _ in sorted(run[qid].items(), key=lambda kv: -kv[1])]
    assert listed[0]["scope"] == "mixed"


@pytest.mark.parametrize("body, name", [
    ({"query": "\ud800 a dog"}, "'query'"), ({"query": "  "}, "'query'"),
    ({"queries": ["a dog", "\ud800"]}, "'queries[1]'"), ({"queries": ["a dog", ""]},
                                                         "'queries[1]'"),
], ids=["surrogate", "empty", "list-surrogate", "list-empty"])
def test_a_bad_search_query_is_a_400_naming_the_field_the_route_takes(server, body, name):
    """issue 77 trust round 6: /v1/search named 'input[0]' (the embeddings route's field)
    for a lone surrogate or an empty query; it names 'query' / 'queries[i]' (param too)."""
    raw = json.dumps({**body, "task": TASK}).encode()  # "\ud800" as JSON escapes it
    r = httpx.post(server + "/v1/search", content=raw,
                   headers={"content-type": "application/json"})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "invalid_input", r.text
    assert err["message"].startswith(name) and "input" not in err["message"], err
    assert err["param"] == name.strip("'").split("[")[0], err
