"""A real OpenAI-compatible HTTP server on 127.0.0.1 for the HTTP backend tests.

``LocalOpenAIServer`` runs ``http.server.ThreadingHTTPServer`` on port 0 in a background
thread and speaks the OpenAI wire format:

* ``POST /v1/embeddings``: the bundled MiniLM (a SentenceTransformer) encodes ``input``
  with ``normalize_embeddings=False``. MiniLM ends in a Normalize layer, so the server
  multiplies every row by ``scale`` (default 3.0) to send unnormalised vectors, as many
  real servers do; client-side normalisation is therefore exercised. ``dimensions``
  truncates the vectors (Matryoshka-style).
* ``POST /v1/chat/completions``: answered by ``server.chat(payload) -> str`` (an ``int``
  instead fails that request with that HTTP status).

Fault injection: ``server.script(Reply(...), ...)`` queues replies; each incoming request
takes the next one (then the queue falls back to normal answers). A ``Reply`` with a
``body`` is sent as-is with its status; without a body, status 200 means "answer normally,
optionally passed through ``mutate``" and any other status sends an OpenAI-style error.
``delay`` waits before answering (for timeouts). Every request is logged in
``server.requests`` (method, path, lower-cased headers, raw body, decoded JSON).

* ``POST /rerank`` and ``POST /v1/rerank``: ``rerank(query, documents) -> [float]``
  (default :func:`overlap_scores`) answers in the shape ``rerank_api`` names: ``"cohere"``
  (Cohere / Jina / vLLM: ``{model, query, documents, top_n}`` ->
  ``{results: [{index, relevance_score}], usage}``) or ``"tei"`` (``{query, texts}`` ->
  ``[{index, score}]``), best first, ``top_n`` applied. A body without the field that shape
  needs (``documents`` / ``texts``) is a 422, as the real servers answer.

``latency`` (seconds) delays every answer; ``in_flight`` / ``max_in_flight`` count the
requests being answered at once (the bound the client promises).

Without a model, ``embed(texts) -> array`` answers ``/v1/embeddings`` (e.g.
:func:`hash_vectors`: bag-of-words hashing, fast and deterministic, for fault tests).
A ``Reply.body`` may also be a function of the :class:`Request` (e.g. to echo a header).

Fixtures ``openai_server`` (needs the session ``minilm`` fixture), ``hash_server`` (no
model) and ``chat_server`` (no model) are defined here; test modules import them
explicitly.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest


@dataclass(frozen=True)
class Reply:
    """One scripted reply (see the module docstring)."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] | Callable[[Request], Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    mutate: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # listen backlog: 64 clients connecting at once get no 1 s SYN retry

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up (timeout test): nothing to report
        super().handle_error(request, client_address)


class LocalOpenAIServer:
    """OpenAI-compatible test server; use as a context manager."""

    def __init__(self, model: Any = None,
                 chat: Callable[[dict[str, Any]], str | int] | None = None,
                 scale: float = 3.0,
                 embed: Callable[[list[str]], np.ndarray] | None = None,
                 rerank: Callable[[str, list[str]], list[float]] | None = None,
                 rerank_api: str = "cohere", latency: float = 0.0) -> None:
        self.model = model
        self.rerank = overlap_scores if rerank is None else rerank
        self.rerank_api = rerank_api
        self.latency = latency
        self.in_flight = 0
        self.max_in_flight = 0
        self.embed = embed
        self.chat = chat
        self.scale = scale
        self.requests: list[Request] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> LocalOpenAIServer:  # noqa: PYI034
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path.endswith(path))

    # -- request handling -------------------------------------------------------------

    def _record(self, request: Request) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            return self._queue.popleft() if self._queue else None

    def _answer(self, path: str, payload: Any) -> tuple[int, Any]:
        if not isinstance(payload, dict):
            return 400, _error("request body must be a JSON object")
        if path == "/v1/embeddings":
            return self._embeddings(payload)
        if path == "/v1/chat/completions":
            return self._chat(payload)
        if path in ("/rerank", "/v1/rerank"):
            return self._rerank(payload)
        return 404, _error(f"no route {path}")

    def _embeddings(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.model is None and self.embed is None:
            return 500, _error("this test server has no embedding model")
        texts = payload.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return 400, _error("'input' must be a string or a list of strings")
        with self._model_lock:
            if self.model is None:
                vecs = self.embed(texts)  # type: ignore[misc]
            else:
                vecs = self.model.encode(texts, normalize_embeddings=False,
                                         convert_to_numpy=True, show_progress_bar=False,
                                         batch_size=64)
        vecs = np.asarray(vecs, dtype=np.float32) * np.float32(self.scale)
        if payload.get("dimensions") is not None:
            vecs = vecs[:, : int(payload["dimensions"])]
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()}
                for i, v in enumerate(vecs)]
        return 200, {"object": "list", "data": data, "model": payload.get("model"),
                     "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    def _chat(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.chat is None:
            return 500, _error("this test server has no chat function")
        content = self.chat(payload)
        if isinstance(content, int):  # chat() may fail one request with an HTTP status
            return content, _error(f"scripted HTTP {content}")
        return 200, {
            "id": "chatcmpl-local", "object": "chat.completion", "model": payload.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    def _rerank(self, payload: dict[str, Any]) -> tuple[int, Any]:
        field_name = "texts" if self.rerank_api == "tei" else "documents"
        docs, query = payload.get(field_name), payload.get("query")
        if not isinstance(query, str) or not isinstance(docs, list):
            return 422, _error(f"'query' and '{field_name}' are required")
        scores = [float(x) for x in self.rerank(query, docs)]
        order = sorted(range(len(docs)), key=lambda i: -scores[i])
        top_n = payload.get("top_n")
        if isinstance(top_n, int):
            order = order[:top_n]
        if self.rerank_api == "tei":
            return 200, [{"index": i, "score": scores[i]} for i in order]
        return 200, {"id": "rerank-local", "model": payload.get("model"),
                     "results": [{"index": i, "relevance_score": scores[i]} for i in order],
                     "usage": {"total_tokens": sum(len(d.split()) for d in docs)}}

    def _enter(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms stall

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes,
                      headers: dict[str, str] | None = None) -> None:
                self._leave()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            counted = False  # this request is counted in server.in_flight

            def _leave(self) -> None:
                if self.counted:  # before the answer is written: the client may send
                    self.counted = False  # its next request as soon as it has read it
                    server._enter(-1)

            def do_POST(self) -> None:
                server._enter(1)
                self.counted = True
                try:
                    if server.latency:
                        server._stop.wait(server.latency)
                    self._post()
                finally:
                    self._leave()

            def _post(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(raw) if raw else None
                except ValueError:
                    payload = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request("POST", self.path, headers, raw, payload)
                reply = server._record(request)
                if reply is not None and reply.delay:
                    server._stop.wait(reply.delay)
                if reply is not None and reply.body is not None:
                    body = reply.body
                    if callable(body):
                        body = body(request)
                    if isinstance(body, (dict, list)):
                        body = json.dumps(body)
                    if isinstance(body, str):
                        body = body.encode()
                    self._send(reply.status, body, reply.headers)
                    return
                if reply is not None and reply.status != 200:
                    message = _error(f"scripted HTTP {reply.status}")
                    self._send(reply.status, json.dumps(message).encode(), reply.headers)
                    return
                status, answer = server._answer(self.path, payload)
                if reply is not None and reply.mutate is not None and status == 200:
                    answer = reply.mutate(answer)
                self._send(status, json.dumps(answer).encode(),
                           reply.headers if reply is not None else None)

        return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def overlap_scores(query: str, documents: list[str]) -> list[float]:
    """Share of the query's words found in each document: a deterministic [0, 1] score."""
    words = set(query.lower().split())
    return [len(words & set(d.lower().split())) / max(1, len(words)) for d in documents]


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def hash_vectors(texts: list[str], dim: int = 16) -> np.ndarray:
    """Bag-of-words hashing vectors (unnormalised): texts sharing words are similar."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            h = hashlib.sha256(word.encode()).digest()
            out[row, h[0] % dim] += 1.0 + h[1] / 255.0
        out[row, dim - 1] += 0.5  # never a zero vector, even for an empty text
    return out


class Sleeps(list[float]):
    """An injectable ``sleep`` that records the delays instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def openai_server(minilm: Any) -> Iterator[LocalOpenAIServer]:
    """A fresh local server whose /v1/embeddings is the bundled MiniLM."""
    with LocalOpenAIServer(model=minilm.model) as server:
        yield server


@pytest.fixture
def hash_server() -> Iterator[LocalOpenAIServer]:
    """A fresh local server whose /v1/embeddings is :func:`hash_vectors` (no model)."""
    with LocalOpenAIServer(embed=hash_vectors) as server:
        yield server


@pytest.fixture
def chat_server() -> Iterator[LocalOpenAIServer]:
    """A fresh local server without a model; set ``chat_server.chat`` in the test."""
    with LocalOpenAIServer() as server:
        yield server
