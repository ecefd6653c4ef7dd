"""The HTTP client the framework classes (:mod:`tttembed.integrations.langchain`,
:mod:`tttembed.integrations.llamaindex`) share: one ``tttembed serve`` base URL, sync
(``httpx.Client``) and async (``httpx.AsyncClient``) calls of the same requests.

* ``search`` / ``asearch``: ``POST /v1/search`` -> :class:`Hit` s (id, text, metadata
  ``id``, ``score``, ``rank`` from 1, ``search_id``, ``version``, ``task``, ``title``).
* ``chain`` / ``achain``: ``POST /v1/chain/search`` -> the final ranking as hits
  (metadata also ``hop``: the passage's place in the chain, None past it, and ``encoder``).
* ``embed`` / ``aembed``: ``POST /v1/embeddings``; documents raw, queries adapted for the
  task (``"input_type": "query"``, the server's OpenAI-compatible route).
* ``click`` / ``aclick``, ``label`` / ``alabel``: ``POST /v1/events`` (a click of a
  served document, by its ``search_id``) and ``POST /v1/feedback`` (a label in [0, 1]).

Each attempt is bounded by ``timeout`` seconds in all (connecting, sending, waiting and
reading the answer; httpx's own timeout bounds each read only, so a server that trickles
its answer would hold an attempt for as long as it trickles): the async calls end the
attempt at its deadline, the sync ones at the first read past it (at most one read
timeout later). A timeout, a connection error, a 429 or a 5xx is retried
``max_retries`` times with full-jitter backoff (``Retry-After`` honoured, capped at
30 s); any other 4xx fails at once with the server's reason. Errors are
:class:`~tttembed.core.errors.BackendError` s that name the class and its own parameters
(``TTTEmbedRetriever(timeout=..., max_retries=...)``). The API key is read from the
variable named by ``api_key_env`` and never appears in an error; user-info in ``url``
(``http://user:secret@host``, sent as basic auth) is shown masked (``user:***@``) in
errors and reprs.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import excerpt
from tttembed.core.limits import RETRY_STATUSES, RetryPolicy, retry_after_seconds
from tttembed.core.pg import mask_url

#: Defaults of every client class: seconds per attempt, retries after the first attempt.
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 2
#: Texts per ``/v1/embeddings`` request (the server takes up to 2,048 by default).
EMBED_BATCH = 256
#: The document fields a search may ask the server to include.
INCLUDE_FIELDS = ("title", "text")


def shown_url(url: str) -> str:
    """``url`` as errors and reprs show it: its user-info masked (a credential)."""
    return mask_url(url, lone_user=True)


def masked_repr_args(args: Iterable[tuple[str | None, Any]]
                     ) -> Iterable[tuple[str | None, Any]]:
    """A pydantic model's repr fields with the user-info of ``url`` masked."""
    return [(name, shown_url(value) if name == "url" and isinstance(value, str) else value)
            for name, value in args]


def base_url(url: str, owner: str) -> str:
    """The server's root: ``url`` without a trailing ``/`` or ``/v1``."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        shown = repr(shown_url(url)) if isinstance(url, str) else repr(url)
        raise ConfigError(f"{owner}(url=...) must start with http:// or https://, got "
                          f"{shown}: give the tttembed server's address, e.g. "
                          "http://127.0.0.1:8000")
    root = url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def check_timeout(timeout: Any, owner: str) -> float:
    """``timeout`` as seconds (ConfigError unless a finite number > 0)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(f"{owner}(timeout=...) must be a finite number of seconds > 0 "
                          f"(each attempt's bound), got {timeout!r}")
    return float(timeout)


def check_max_retries(max_retries: Any, owner: str) -> int:
    """``max_retries`` (ConfigError unless an integer >= 0)."""
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"{owner}(max_retries=...) must be an integer >= 0, got "
                          f"{max_retries!r}")
    return max_retries


class Answer(NamedTuple):
    """One attempt's answer, read whole within its deadline."""

    status: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Hit:
    """One served document, as the frameworks' documents (nodes) carry it."""

    id: str
    text: str
    score: float
    metadata: dict[str, Any]


def _text(doc: Mapping[str, Any], include: Sequence[str]) -> str:
    return " ".join(str(doc.get(f) or "") for f in include if doc.get(f)).strip()


def search_hits(answer: Mapping[str, Any], include: Sequence[str]) -> list[Hit]:
    """The hits of a one-query ``/v1/search`` answer."""
    item = answer["data"][0]
    docs = item.get("documents") or [{"id": d} for d in item["ids"]]
    common = {"search_id": item.get("search_id"), "version": answer.get("version"),
              "task": answer.get("task")}
    hits = []
    for rank, (doc, score) in enumerate(zip(docs, item["scores"]), start=1):
        meta = {"id": doc["id"], "score": float(score), "rank": rank, **common}
        if "title" in include:
            meta["title"] = doc.get("title", "")
        hits.append(Hit(doc["id"], _text(doc, include), float(score), meta))
    return hits


def chain_hits(answer: Mapping[str, Any], include: Sequence[str]) -> list[Hit]:
    """The final ranking of a ``/v1/chain/search`` answer."""
    hop = {h["id"]: i for i, h in enumerate(answer["hops"])}
    common = {k: answer.get(k) for k in ("search_id", "version", "encoder")}
    hits = []
    for rank, doc in enumerate(answer["data"], start=1):
        meta = {"id": doc["id"], "score": float(doc["score"]), "rank": rank,
                "hop": hop.get(doc["id"]), **common}
        if "title" in include:
            meta["title"] = doc.get("title", "")
        hits.append(Hit(doc["id"], _text(doc, include), float(doc["score"]), meta))
    return hits


def check_include(include: Sequence[str], owner: str) -> list[str]:
    unknown = [f for f in include if f not in INCLUDE_FIELDS]
    if unknown:
        raise ConfigError(f"{owner}(include=...) names {unknown[0]!r}: the document fields "
                          f"are {', '.join(INCLUDE_FIELDS)}")
    return list(dict.fromkeys(include))


def click_event(metadata: Mapping[str, Any], session_id: str, owner: str) -> dict[str, Any]:
    """The short-form click event of a served document (its metadata)."""
    if not isinstance(session_id, str) or not session_id:
        raise ConfigError(f"{owner}.record_click(session_id=...) must be a non-empty "
                          "string: the user's session (the server caps clicks per session)")
    return {"search_id": _search_id(metadata, owner, "record_click"),
            "doc_id": str(metadata["id"]), "type": "click", "session_id": session_id}


def label_body(metadata: Mapping[str, Any], grade: float, owner: str) -> dict[str, Any]:
    """The ``/v1/feedback`` body of a label for a served document."""
    if isinstance(grade, bool) or not isinstance(grade, (int, float)) \
            or not 0.0 <= float(grade) <= 1.0:
        raise ConfigError(f"{owner}.record_label(grade=...) must be a number in [0, 1] "
                          f"(0 not relevant, 1 relevant), got {grade!r}")
    return {"search_id": _search_id(metadata, owner, "record_label"),
            "doc_id": str(metadata["id"]), "label": float(grade)}


def _search_id(metadata: Mapping[str, Any], owner: str, method: str) -> str:
    sid = metadata.get("search_id")
    if not sid or "id" not in metadata:
        raise ConfigError(f"{owner}.{method}: this document carries no search_id (the "
                          "server logs searches only with --registry): pass a document "
                          f"this retriever returned from a server started with --registry")
    return str(sid)


class ServerClient:
    """Requests to one ``tttembed serve`` for the class named ``owner`` (its errors name
    it and its parameters)."""

    def __init__(self, url: str, *, owner: str, api_key_env: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        timeout, max_retries = check_timeout(timeout, owner), \
            check_max_retries(max_retries, owner)
        self.owner, self.url = owner, base_url(url, owner)
        self.shown = shown_url(self.url)
        self.api_key_env = api_key_env
        self.key = os.environ.get(api_key_env) if api_key_env else None
        if api_key_env and not self.key:
            raise ConfigError(f"{owner}(api_key_env={api_key_env!r}): ${api_key_env} is not "
                              "set; export the server's key there, or leave api_key_env "
                              "out for a server started without --api-key-env")
        parts = urlsplit(self.url)
        #: what an error never shows: the key, the URL's password (or a lone user name)
        self._secrets = [self.key, parts.password if parts.password is not None
                         else parts.username]
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.policy = RetryPolicy(max_retries=self.max_retries, timeout=self.timeout)
        self._rng = random.Random()
        self._sync: httpx.Client | None = None

    def __repr__(self) -> str:
        return (f"ServerClient(url={self.shown!r}, owner={self.owner!r}, "
                f"api_key_env={self.api_key_env!r}, timeout={self.timeout:g}, "
                f"max_retries={self.max_retries})")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    # -- one request: attempts, waits, the verdict ---------------------------------------

    def _verdict(self, path: str, response: Answer | None, error: str,
                 attempt: int) -> tuple[Any, float | None, str]:
        """(body, None, "") on success, (None, delay, reason) to retry; raises when the
        answer is final (a 4xx other than 429, malformed JSON, retries spent)."""
        url = self.shown + path
        if response is not None and response.status < 300:
            try:
                return json.loads(response.content), None, ""
            except (ValueError, UnicodeDecodeError):
                raise BackendError(f"POST {url} returned malformed JSON (HTTP "
                                   f"{response.status}): is {self.shown} a tttembed "
                                   f"server? ({self.owner}(url=...))") from None
        delay = None
        if response is not None:
            text = excerpt(response.text, self._secrets) or "(empty body)"
            status = response.status
            if status not in RETRY_STATUSES:
                raise BackendError(f"POST {url} returned HTTP {status}: {text} "
                                   f"(not retried; {self._fix(status)})")
            error = f"HTTP {status}: {text}"
            hint = retry_after_seconds(response.headers.get("Retry-After"))
            delay = None if hint is None else min(hint, self.policy.max_delay)
        if attempt >= self.max_retries:
            tries = attempt + 1
            raise BackendError(
                f"POST {url} failed after {tries} attempt{'s' if tries > 1 else ''}: "
                f"{error} (is the server running at {self.shown}? if it is slow, raise "
                f"{self.owner}(timeout=..., max_retries=...): now timeout="
                f"{self.timeout:g} s per attempt, max_retries={self.max_retries})")
        return None, self.policy.backoff(attempt, self._rng) if delay is None else delay, \
            error

    def _fix(self, status: int) -> str:
        if status in (401, 403):
            return (f"check the key in ${self.api_key_env}" if self.api_key_env else
                    f"the server wants a key: set {self.owner}(api_key_env=...) to the "
                    "variable that holds it")
        if status == 404:
            return f"check {self.owner}(url=...) and the server's options"
        return "the server's reason says what to change"

    def _error(self, exc: Exception) -> str:
        if isinstance(exc, (httpx.TimeoutException, TimeoutError, asyncio.TimeoutError)):
            return f"timed out after {self.timeout:g} s"
        return "connection failed: " + (excerpt(str(exc), self._secrets)
                                        or type(exc).__name__)

    def _attempt(self, client: httpx.Client, url: str, body: dict[str, Any]) -> Answer:
        """One POST read whole, ended (TimeoutError) at the first read past ``timeout``
        seconds after it began."""
        deadline = time.monotonic() + self.timeout
        with client.stream("POST", url, json=body, headers=self._headers()) as response:
            chunks = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(url)
            return Answer(response.status_code, response.headers, b"".join(chunks))

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` as JSON; the decoded answer."""
        if self._sync is None:
            self._sync = httpx.Client(timeout=self.timeout)
        for attempt in range(self.max_retries + 1):
            response, error = None, ""
            try:
                response = self._attempt(self._sync, self.url + path, body)
            except (httpx.TimeoutException, httpx.TransportError, TimeoutError) as exc:
                error = self._error(exc)
            answer, delay, _ = self._verdict(path, response, error, attempt)
            if delay is None:
                return answer
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _aattempt(self, client: httpx.AsyncClient, url: str,
                        body: dict[str, Any]) -> Answer:
        response = await client.post(url, json=body, headers=self._headers())
        return Answer(response.status_code, response.headers, response.content)

    async def apost(self, path: str, body: dict[str, Any]) -> Any:
        """``post`` on the running event loop (``httpx.AsyncClient``); each attempt is
        cancelled at its deadline."""
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.max_retries + 1):
                response, error = None, ""
                try:
                    response = await asyncio.wait_for(
                        self._aattempt(client, self.url + path, body), self.timeout)
                except (httpx.TimeoutException, httpx.TransportError, TimeoutError,
                        asyncio.TimeoutError) as exc:  # one class from Python 3.11 on
                    error = self._error(exc)
                answer, delay, _ = self._verdict(path, response, error, attempt)
                if delay is None:
                    return answer
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    # -- the requests ---------------------------------------------------------------------

    @staticmethod
    def search_body(query: str, task: str | None, k: int,
                    include: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "k": int(k), "include": list(include)}
        if task is not None:
            body["task"] = task
        return body

    @staticmethod
    def chain_body(question: str, k: int, max_hops: int | None, beam: int,
                   include: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"question": question, "top_k": int(k), "beam": int(beam)}
        if max_hops is not None:
            body["max_hops"] = int(max_hops)
        if include:
            body["include"] = list(include)
        return body

    @staticmethod
    def embed_bodies(texts: Sequence[str], query: bool, task: str | None
                     ) -> list[dict[str, Any]]:
        extra: dict[str, Any] = {"input_type": "query" if query else "document"}
        if query and task is not None:
            extra["task"] = task
        return [{"input": list(texts[i:i + EMBED_BATCH]), "model": "tttembed", **extra}
                for i in range(0, len(texts), EMBED_BATCH)]

    def embed(self, texts: Sequence[str], *, query: bool, task: str | None
              ) -> list[list[float]]:
        out: list[list[float]] = []
        for body in self.embed_bodies(texts, query, task):
            out += _vectors(self.post("/v1/embeddings", body))
        return out

    async def aembed(self, texts: Sequence[str], *, query: bool, task: str | None
                     ) -> list[list[float]]:
        out: list[list[float]] = []
        for body in self.embed_bodies(texts, query, task):
            out += _vectors(await self.apost("/v1/embeddings", body))
        return out


def _vectors(answer: Mapping[str, Any]) -> list[list[float]]:
    rows = sorted(answer["data"], key=lambda d: d["index"])
    return [[float(x) for x in d["embedding"]] for d in rows]


__all__ = ["DEFAULT_MAX_RETRIES", "DEFAULT_TIMEOUT", "INCLUDE_FIELDS", "Answer", "Hit",
           "ServerClient", "base_url", "chain_hits", "check_include", "check_max_retries",
           "check_timeout", "click_event", "label_body", "masked_repr_args", "search_hits",
           "shown_url"]
