"""``rerank:MODEL@BASE_URL``: rewards from a rerank API served elsewhere (vLLM, TEI,
Infinity, Cohere, Jina, Voyage-compatible endpoints).

Two wire shapes, both ``POST {BASE_URL}/rerank``:

* ``api="cohere"`` (Cohere, Jina, vLLM, Infinity): ``{model, query, documents, top_n}``
  -> ``{results: [{index, relevance_score}]}``. Give the base URL with its version
  (``http://127.0.0.1:8000/v1`` for vLLM, ``https://api.cohere.com/v2``).
* ``api="tei"`` (Hugging Face text-embeddings-inference): ``{query, texts, raw_scores:
  false, truncate: true}`` -> ``[{index, score}]``; the base URL is the server root
  (``http://127.0.0.1:8080``).
* ``api="auto"`` (default): the first requests carry both ``documents`` and ``texts``
  and the shape of the first answer (an object with ``results``, or a list) fixes the
  API for the rest of the run. A server that rejects the extra field needs ``api=``.

All candidates of one query go in one request, split into requests of at most
``max_documents_per_request`` (default 32: TEI's default ``--max-client-batch-size``;
Cohere takes 1,000). Requests run ``max_concurrency`` at a time (default 8).

Reward rule (``mapping``): the score the API returns, as is (``"relevance_score"``).
Cohere, Jina, vLLM and TEI (``raw_scores: false``) all return it on [0, 1] already: vLLM
serving ``Qwen/Qwen3-Reranker-*`` with the Qwen3 override returns
``sigmoid(l_yes - l_no) = P(yes)``, the seed's reward (see ``docs/scaling.md``). A server
that returns raw logits needs ``sigmoid=True`` (``mapping = "sigmoid(score)"``). A score
outside [0, 1] without it, a missing index or a non-number is a BackendError: a reward is
never clipped or guessed.

``template="qwen3"`` (implied by ``instruction``, e.g. the CLI's ``--instruction``)
formats the texts client-side as the Qwen3-Reranker prompt
(query: ``PREFIX + "<Instruct>: {instruction}\\n<Query>: {query}\\n"``, document:
``"<Document>: {doc}" + SUFFIX``, as vLLM's Qwen3 reranker examples do), so a vLLM server
running the original Qwen3-Reranker weights gives the ``qwen3-reranker:`` reward.

Every answered request reports its pairs through ``score_each``'s ``on_result`` so the
ledger commits them before the other requests of the query end (a failed request loses
only its own pairs). Options: ``api``, ``max_documents_per_request``, ``max_concurrency``
(the CLI's ``--concurrency``), ``rpm`` / ``tpm`` (``--rpm``; tokens estimated as 1 per 4
characters, corrected from ``usage.total_tokens`` when the server reports it),
``api_key_env`` (default ``RERANK_API_KEY``; unset is fine for local servers),
``sigmoid``, ``template``, ``instruction``, ``retry``, ``max_retries``, ``timeout``,
``deadline``.

``identity`` is ``rerank:MODEL@BASE_URL`` plus ``template`` / ``instruction`` /
``sigmoid`` when they are set: the API shape, the split, concurrency, limits and the key
do not change rewards and are not in it.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from tttembed.core.backends import identity
from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import (
    JSONClient,
    RetryPolicy,
    estimate_tokens,
    map_ordered,
    split_model_url,
)
from tttembed.score.base import Capabilities, Item, declare

APIS = ("auto", "cohere", "tei")
TEMPLATES = ("qwen3",)
DEFAULT_API_KEY_ENV = "RERANK_API_KEY"
DEFAULT_MAX_DOCUMENTS = 32


def _default_instruction() -> str:
    from tttembed.score.qwen3 import DEFAULT_INSTRUCTION

    return DEFAULT_INSTRUCTION


class RerankScorer:
    """Scorer backed by a rerank HTTP endpoint (Cohere/Jina/vLLM or TEI shape)."""

    def __init__(self, model: str, base_url: str, *, spec: str | None = None,
                 api: str = "auto", max_documents_per_request: int = DEFAULT_MAX_DOCUMENTS,
                 max_concurrency: int = 8, rpm: float | None = None, tpm: float | None = None,
                 api_key_env: str | None = DEFAULT_API_KEY_ENV, sigmoid: bool = False,
                 template: str | None = None, instruction: str | None = None,
                 retry: RetryPolicy | None = None, max_retries: int | None = None,
                 timeout: float | None = None, deadline: float | None = None,
                 sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if api not in APIS:
            raise ConfigError(f"rerank: api must be one of {', '.join(APIS)}, got {api!r}")
        if template is not None and template not in TEMPLATES:
            raise ConfigError(f"rerank: template must be one of {', '.join(TEMPLATES)} "
                              f"(or unset), got {template!r}")
        if instruction is not None and template is None:
            template = "qwen3"  # an instruction is only meaningful in the Qwen3 prompt
        if int(max_documents_per_request) < 1 or int(max_concurrency) < 1:
            raise ConfigError("rerank: max_documents_per_request and max_concurrency must "
                              "be >= 1")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.spec = spec or f"rerank:{model}@{self.base_url}"
        self.api = api
        self.max_documents = int(max_documents_per_request)
        self.max_concurrency = int(max_concurrency)
        self.sigmoid = bool(sigmoid)
        self.template = template
        self.instruction = instruction
        self.mapping = "sigmoid(score)" if self.sigmoid else "relevance_score"
        self.identity = identity(
            f"rerank:{model}@{self.base_url}", template=template,
            instruction=None if instruction in (None, _default_instruction())
            else repr(instruction),
            sigmoid="true" if self.sigmoid else None)
        policy = (retry or RetryPolicy()).with_overrides(max_retries=max_retries,
                                                          timeout=timeout, deadline=deadline)
        self.client = JSONClient(self.base_url, api_key_env=api_key_env, policy=policy,
                                 sleep=sleep, rng=rng, transport=transport,
                                 concurrency=self.max_concurrency, rpm=rpm, tpm=tpm)
        self._api_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RerankScorer(identity={self.identity!r}, api={self.api!r})"

    @property
    def calls(self) -> int:
        """HTTP requests that succeeded so far."""
        return self.client.calls

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RerankScorer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- texts and wire ---------------------------------------------------------------
    def _texts(self, query: str, docs: Sequence[str]) -> tuple[str, list[str]]:
        if self.template != "qwen3":
            return query, list(docs)
        from tttembed.score.qwen3 import DEFAULT_INSTRUCTION, PREFIX, SUFFIX

        instruction = self.instruction or DEFAULT_INSTRUCTION
        return (f"{PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n",
                [f"<Document>: {d}{SUFFIX}" for d in docs])

    def _payload(self, query: str, docs: list[str]) -> dict[str, Any]:
        api = self.api
        payload: dict[str, Any] = {"query": query}
        if api in ("cohere", "auto"):
            payload.update(model=self.model, documents=docs, top_n=len(docs))
        if api in ("tei", "auto"):
            payload.update(texts=docs, raw_scores=False, truncate=True)
        return payload

    def _request(self, query: str, docs: list[str]) -> list[float]:
        """Rewards of one request's documents, in their order."""
        payload = self._payload(query, docs)
        body = self.client.post("/rerank", payload,
                                tokens=estimate_tokens([query] * len(docs) + docs))
        return self._rewards(body, len(docs))

    def _detect(self, body: Any) -> str:
        """The API an answer speaks; fixes ``api`` on the first answer in auto mode."""
        found = ("tei" if isinstance(body, list)
                 else "cohere" if isinstance(body, dict) and "results" in body else None)
        if found is None:
            raise BackendError(
                f"{self.base_url}/rerank returned neither {{results: [...]}} (Cohere/Jina/"
                "vLLM) nor a list (TEI): is it a rerank endpoint? (for vLLM give the base "
                "URL with /v1)")
        with self._api_lock:
            if self.api == "auto":
                self.api = found
        return found

    def _rewards(self, body: Any, n: int) -> list[float]:
        where = f"{self.base_url}/rerank"
        api = self._detect(body)
        rows, key = (body, "score") if api == "tei" else (body["results"], "relevance_score")
        out = [math.nan] * n
        try:
            if len(rows) != n:
                raise ValueError(f"{len(rows)} results for the {n} documents sent")
            for row in rows:
                i, value = row["index"], row[key]
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                    raise ValueError(f"index {i!r} out of 0..{n - 1}")
                if not math.isnan(out[i]):
                    raise ValueError(f"index {i} answered twice")
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"score {value!r} of index {i} is not a number")
                if not math.isfinite(value):
                    raise BackendError(
                        f"{where} answered the score {value!r} for document {i} of the {n} "
                        "sent: a judge's score must be a finite number (NaN and infinities "
                        "are refused, never stored; check the server's model and its input)")
                out[i] = float(value)
        except (TypeError, KeyError, ValueError) as exc:
            raise BackendError(f"{where} returned malformed results ({exc}); expected "
                               f"[{{index, {key}}}] ({api} API)") from None
        return [self._map(v, where, n) for v in out]

    def _map(self, value: float, where: str, n: int) -> float:
        if math.isnan(value) or math.isinf(value):
            raise BackendError(f"{where} left a document without a finite score (sent {n} "
                               "documents with top_n = all)")
        if self.sigmoid:
            return 1.0 / (1.0 + math.exp(-value)) if value > -700 else 0.0
        if not 0.0 <= value <= 1.0:
            raise BackendError(f"{where} returned a score outside [0, 1] ({value!r}); if "
                               "the server sends raw logits, pass sigmoid=true")
        return value

    # -- Scorer -----------------------------------------------------------------------
    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        return self.score_each(query, docs)

    def score_each(self, query: Item, docs: Sequence[Item],
                   on_result: Callable[[int, float], None] | None = None) -> np.ndarray:
        """``score``, calling ``on_result(position, reward)`` for each pair as soon as its
        request is answered (from a worker thread). When a request fails, the others in
        flight end (and are reported) first; requests not yet sent are not sent."""
        docs = list(docs)
        q, texts = self._texts(query.text, [d.text for d in docs])
        step = self.max_documents
        groups = [list(range(s, min(s + step, len(docs)))) for s in range(0, len(docs), step)]

        def one(group: list[int]) -> list[float]:
            rewards = self._request(q, [texts[i] for i in group])
            if on_result is not None:
                for i, r in zip(group, rewards):
                    on_result(i, r)
            return rewards

        out = np.full(len(docs), np.nan, dtype=np.float64)
        for group, rewards in zip(groups, map_ordered(one, groups, self.max_concurrency)):
            out[group] = rewards
        return out


@declare(Capabilities(cacheable=True))
def from_spec(rest: str, **options: Any) -> RerankScorer:
    model, base_url = split_model_url(rest, "rerank")
    return RerankScorer(model, base_url, spec=f"rerank:{rest}", **options)
