"""``llm:MODEL[@BASE_URL]``: an LLM judge over an OpenAI-compatible ``/chat/completions``.

Each (query, document) pair is one chat request at temperature 0 with a fixed 0-5
relevance rubric; the model reasons briefly and ends with ``Score: X``. The last
``Score: X`` in the answer is read (X an integer or decimal in [0, 5]) and the reward is
``X / 5`` (``mapping = "score/5"``). An answer without a valid score is asked again once;
if the second answer is no better the pair is recorded as missing (``nan``) with a
warning that names the query and document ids. :meth:`LLMJudge.score_each` reports each
pair as soon as it is answered, so the ledger commits paid pairs one by one (a chunk in
which one pair fails keeps the answered ones). Transport failures follow the shared
:class:`~tttembed.core.http.RetryPolicy` and end in :class:`~tttembed.core.errors.BackendError`.

Options: ``max_concurrency`` (4 pairs in flight; the CLI's ``--concurrency``), ``rpm`` /
``tpm`` (requests / tokens per minute; a request's tokens are estimated as 1 per 4
characters of its messages plus ``max_tokens``, corrected from ``usage.total_tokens``;
the CLI's ``--rpm``), ``api_key_env`` (default
``OPENAI_API_KEY``; unset is fine for local servers), ``max_tokens`` (sent when given),
``retry``, ``max_retries``, ``timeout``, ``deadline`` (the CLI's ``--max-retries`` /
``--timeout``).

``identity`` is ``llm:MODEL@BASE_URL rubric=HASH`` (the resolved endpoint; HASH is
:data:`RUBRIC_HASH`, over the system rubric and the user-message template), plus
``max_tokens=N`` when given (a short answer can lose its score line). Concurrency, retries,
timeouts and the API key do not change rewards and are not in it.
"""

from __future__ import annotations

import hashlib
import random
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from tttembed.core.backends import identity
from tttembed.core.errors import BackendError
from tttembed.core.http import (
    DEFAULT_API_KEY_ENV,
    JSONClient,
    RetryPolicy,
    estimate_tokens,
    map_ordered,
    split_model_url,
)
from tttembed.score.base import Item

MAX_SCORE = 5.0

RUBRIC = """You judge how relevant a document is to a search query.
Use this scale:
5 = perfectly relevant: the document fully answers the query.
4 = highly relevant: it answers most of the query.
3 = relevant: it answers part of the query or gives important context.
2 = somewhat relevant: it is on the topic but does not answer the query.
1 = barely relevant: it shares a few terms or a loose connection.
0 = unrelated.
Reason briefly (at most three sentences), then end your answer with a last line of the
form `Score: X`, where X is a number from 0 to 5."""

_SCORE = re.compile(r"\bscore\s*:\s*[*_`]*\s*([^\s*_`]+)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class JudgeWarning(RuntimeWarning):
    """A pair the judge could not score (recorded as nan)."""


def parse_score(answer: str | None) -> float | None:
    """The value of the last ``Score: X`` in ``answer`` if it is in [0, 5], else None."""
    if not answer:
        return None
    matches = _SCORE.findall(answer)
    if not matches:
        return None
    token = matches[-1].rstrip(".,;:!)]")
    token = token.removesuffix("/5")
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if 0.0 <= value <= MAX_SCORE else None


def user_message(query: str, document: str) -> str:
    return f"Query:\n{query}\n\nDocument:\n{document}\n\nHow relevant is the document?"


#: sha256 (first 12 hex digits) of the rubric and the user-message template: a change to
#: either gives the judge a new identity, so the ledger never mixes the two.
RUBRIC_HASH = hashlib.sha256(
    (RUBRIC + "\x00" + user_message("{query}", "{document}")).encode("utf-8")).hexdigest()[:12]


class LLMJudge:
    """Scorer that asks a chat model for a 0-5 relevance grade per (query, doc) pair."""

    mapping = "score/5"

    def __init__(self, model: str, base_url: str, *, spec: str | None = None,
                 max_concurrency: int = 4, api_key_env: str | None = DEFAULT_API_KEY_ENV,
                 max_tokens: int | None = None, retry: RetryPolicy | None = None,
                 max_retries: int | None = None, timeout: float | None = None,
                 deadline: float | None = None, rpm: float | None = None,
                 tpm: float | None = None,
                 sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.spec = spec or f"llm:{model}@{self.base_url}"
        self.max_concurrency = int(max_concurrency)
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.identity = identity(f"llm:{model}@{self.base_url}", rubric=RUBRIC_HASH,
                                 max_tokens=self.max_tokens)
        policy = (retry or RetryPolicy()).with_overrides(max_retries=max_retries,
                                                          timeout=timeout, deadline=deadline)
        self.client = JSONClient(self.base_url, api_key_env=api_key_env, policy=policy,
                                 sleep=sleep, rng=rng, transport=transport,
                                 concurrency=self.max_concurrency, rpm=rpm, tpm=tpm)

    def __repr__(self) -> str:
        return f"LLMJudge(spec={self.spec!r})"

    @property
    def calls(self) -> int:
        """HTTP requests that succeeded so far."""
        return self.client.calls

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> LLMJudge:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, query: str, document: str) -> str | None:
        payload: dict[str, Any] = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": RUBRIC},
                {"role": "user", "content": user_message(query, document)},
            ],
        }
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        texts = [m["content"] for m in payload["messages"]]
        body = self.client.post("/chat/completions", payload,
                                tokens=estimate_tokens(texts) + (self.max_tokens or 0))
        try:
            content = body["choices"][0]["message"]["content"]
        except (TypeError, KeyError, IndexError):
            raise BackendError(
                f"{self.base_url}/chat/completions returned JSON without "
                "choices[0].message.content (is it an OpenAI-compatible chat endpoint?)"
            ) from None
        return content if isinstance(content, str) else None

    def _judge(self, query: str, document: str) -> tuple[float, str | None]:
        answer = None
        for _ in range(2):
            answer = self._ask(query, document)
            value = parse_score(answer)
            if value is not None:
                return value / MAX_SCORE, None
        return float("nan"), answer

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        return self.score_each(query, docs)

    def score_each(self, query: Item, docs: Sequence[Item],
                   on_result: Callable[[int, float], None] | None = None) -> np.ndarray:
        """``score``, calling ``on_result(position, reward)`` (from a worker thread) as soon
        as each pair is answered, so a caller can commit it before the other pairs end.

        When one pair fails, the pairs in flight still end (and are reported) before the
        error is raised; pairs not yet sent are not sent."""
        docs = list(docs)

        def judge(i: int) -> tuple[float, str | None]:
            result = self._judge(query.text, docs[i].text)
            if on_result is not None:
                on_result(i, result[0])
            return result

        results = map_ordered(judge, range(len(docs)), self.max_concurrency)
        out = np.array([r for r, _ in results], dtype=np.float64)
        for doc, (value, answer) in zip(docs, results):
            if np.isnan(value):
                excerpt = " ".join(self.client.redact(answer or "(empty answer)").split())[-80:]
                message = (f"{self.spec}: no valid 'Score: X' (0-5) for query {query.id!r}, "
                           f"doc {doc.id!r} after 2 requests; recorded as missing "
                           f"(--retry-missing asks again). Answer ended: {excerpt!r}")
                warnings.warn(message, JudgeWarning, stacklevel=3)
        return out


def from_spec(rest: str, **options: Any) -> LLMJudge:
    model, base_url = split_model_url(rest, "llm")
    return LLMJudge(model, base_url, spec=f"llm:{rest}", **options)
