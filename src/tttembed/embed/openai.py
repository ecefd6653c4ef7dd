"""``openai:MODEL[@BASE_URL]``: embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

The base URL defaults to ``https://api.openai.com/v1``; any OpenAI-compatible server
works (vLLM, TEI, Ollama, llama.cpp): ``openai:bge-m3@http://127.0.0.1:8000/v1``. The
spec is split at the last ``@`` that is followed by ``http://`` or ``https://``, so model
names may contain ``@``.

Options: ``batch_size`` (64 texts per request), ``max_concurrency`` (4 requests in
flight; the CLI's ``--concurrency``), ``rpm`` / ``tpm`` (requests / tokens per minute;
tokens estimated as 1 per 4 characters, corrected from ``usage.total_tokens``; the CLI's
``--rpm``), ``api_key_env`` (name of the variable holding the key, default
``OPENAI_API_KEY``; unset is fine for local servers), ``query_prompt`` /
``document_prompt`` (prefixes added client-side), ``dimensions`` (sent as the
``dimensions`` field), ``dim`` (asserts the vector size), ``retry`` (a
:class:`~tttembed.core.http.RetryPolicy`), ``max_retries``, ``timeout`` and ``deadline``
(override it; the CLI's ``--max-retries`` / ``--timeout``).
When one request of an ``encode`` fails, the vectors that did arrive are attached to the
raised error as ``partial_rows`` (``{text position: normalised vector}``) so the
embedding cache keeps them. Rows are L2-normalised client-side. Every answer is validated before it is returned (so
before it can reach the embedding cache): as many vectors as inputs, finite values, no
zero-norm row, the expected dimension (``dim``, e.g. from an index manifest; without
``dim``/``dimensions`` the first valid answer fixes it). A failing answer is a
:class:`~tttembed.core.errors.BackendError` naming the endpoint. Reading ``.dim`` before
any ``encode`` sends one probe request when no dimension is known.
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
    DEFAULT_API_KEY_ENV,
    JSONClient,
    RetryPolicy,
    estimate_tokens,
    map_ordered,
    split_model_url,
)
from tttembed.core.progress import Advance
from tttembed.embed.base import Kind, check_kind, l2_normalize
from tttembed.embed.cache import check_vectors


class OpenAIEmbedder:
    """Embedder backed by an OpenAI-compatible HTTP embeddings endpoint."""

    #: vector-changing options it was built with (set by get_embedder; never mutated)
    options: dict[str, Any] = {}

    def __init__(self, model: str, base_url: str, *, spec: str | None = None,
                 batch_size: int = 64, max_concurrency: int = 4,
                 api_key_env: str | None = DEFAULT_API_KEY_ENV,
                 query_prompt: str = "", document_prompt: str = "",
                 dimensions: int | None = None, dim: int | None = None,
                 retry: RetryPolicy | None = None, max_retries: int | None = None,
                 timeout: float | None = None, deadline: float | None = None,
                 rpm: float | None = None, tpm: float | None = None,
                 sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if int(max_concurrency) < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if dimensions is not None and dim is not None and int(dimensions) != int(dim):
            raise ConfigError(f"dimensions={dimensions} and dim={dim} disagree; give one")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.spec = spec or f"openai:{model}@{self.base_url}"
        self.batch_size = int(batch_size)
        self.max_concurrency = int(max_concurrency)
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.dimensions = None if dimensions is None else int(dimensions)
        expected = dim if dim is not None else dimensions
        self._dim: int | None = None if expected is None else int(expected)
        self._dim_lock = threading.Lock()
        policy = (retry or RetryPolicy()).with_overrides(max_retries=max_retries,
                                                          timeout=timeout, deadline=deadline)
        self.client = JSONClient(self.base_url, api_key_env=api_key_env, policy=policy,
                                 sleep=sleep, rng=rng, transport=transport,
                                 concurrency=self.max_concurrency, rpm=rpm, tpm=tpm)
        self.identity = identity(
            self.spec, query_prompt=repr(query_prompt) if query_prompt else None,
            document_prompt=repr(document_prompt) if document_prompt else None,
            dimensions=self.dimensions)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(identity={self.identity!r}, dim={self._dim})"

    @property
    def calls(self) -> int:
        """HTTP requests that succeeded so far."""
        return self.client.calls

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._embed_batch(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> OpenAIEmbedder:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, texts: Sequence[str], kind: Kind = "document",
               progress: Advance | None = None) -> np.ndarray:
        check_kind(kind)
        prompt = self.query_prompt if kind == "query" else self.document_prompt
        texts = [prompt + t for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        n_batches = math.ceil(len(texts) / self.batch_size)
        batches = [texts[i * self.batch_size:(i + 1) * self.batch_size]
                   for i in range(n_batches)]
        try:
            parts = map_ordered(self._embed_batch, batches, self.max_concurrency)
        except Exception as exc:
            arrived = getattr(exc, "partial_results", None) or {}
            rows: dict[int, np.ndarray] = {}
            for b, vecs in arrived.items():
                for j, row in enumerate(l2_normalize(vecs)):
                    rows[b * self.batch_size + j] = row
            exc.partial_rows = rows  # type: ignore[attr-defined]
            raise
        if progress is not None:
            progress(len(texts))
        return l2_normalize(np.concatenate(parts, axis=0))

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        body = self.client.post("/embeddings", payload, tokens=estimate_tokens(batch))
        vecs = self._parse(body, len(batch))
        where = f"{self.base_url}/embeddings ({self.spec})"
        with self._dim_lock:
            check_vectors(vecs, len(batch), self._dim, where)
            if self._dim is None:
                self._dim = int(vecs.shape[1])
        return vecs

    def _parse(self, body: Any, n: int) -> np.ndarray:
        where = f"{self.base_url}/embeddings"
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise BackendError(f"{where} returned JSON without a 'data' list "
                               "(is it an OpenAI-compatible embeddings endpoint?)")
        if len(data) != n:
            raise BackendError(f"{where} returned {len(data)} embeddings for {n} inputs "
                               "(the server dropped or added items)")
        try:
            if all(isinstance(d, dict) and "index" in d for d in data):
                items = sorted(data, key=lambda d: int(d["index"]))
                indices = [int(d["index"]) for d in items]
                if indices != list(range(n)):
                    raise ValueError(f"indices {indices[:8]} are not 0..{n - 1}")
            else:
                items = data
            vecs = np.asarray([d["embedding"] for d in items], dtype=np.float32)
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise BackendError(f"{where} returned malformed embeddings ({exc}); expected "
                               "data[i] = {index: i, embedding: [floats]}") from None
        if vecs.ndim != 2 or vecs.shape[1] == 0:
            raise BackendError(f"{where} returned embeddings of uneven or zero length")
        return vecs


def from_spec(rest: str, **options: Any) -> OpenAIEmbedder:
    model, base_url = split_model_url(rest, "openai")
    return OpenAIEmbedder(model, base_url, spec=f"openai:{rest}", **options)
