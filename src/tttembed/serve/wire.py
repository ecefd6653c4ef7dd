"""The OpenAI wire format: request validation, response bodies, the error shape.

Nothing here touches a model; every function is plain data in, plain data out, so the
rules are testable without a server. Bad input raises :class:`ApiError` (a 4xx with
OpenAI's ``{"error": {"message", "type", "param", "code"}}`` body).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ENCODINGS = ("float", "base64")
INPUT_TYPES = ("query", "document")
#: The most characters one query may hold, at every route that takes one (search,
#: query embeddings, chain search, feedback by query; ``serve --max-query-chars``):
#: a longer one is refused with 413, naming the limit. Every length under it is served,
#: logged, clicked, labelled and learned from on both stores.
MAX_QUERY_CHARS = 16_384


class ApiError(Exception):
    """A client error: HTTP ``status`` and OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = (
            status, message, param, code, type)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A validated ``/v1/embeddings`` body. ``task`` is None for documents."""

    texts: list[str]
    model: str
    encoding_format: str
    task: str | None
    dimensions: int | None = None


def _texts(value: Any, max_inputs: int, param: str = "input",
           single: bool = False) -> list[str]:
    """The texts of field ``param`` (a string when ``single``: errors name ``param``, else
    ``param[i]``), each non-empty and valid Unicode."""
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        texts = list(value)
    elif isinstance(value, list) and value and all(isinstance(v, (int, list)) for v in value):
        raise ApiError(400, f"token arrays are not supported: send '{param}' as text (a "
                       "string or a list of strings)", param=param, code="unsupported_input")
    else:
        raise ApiError(400, f"'{param}' must be a non-empty string or a non-empty list of "
                       "strings", param=param, code="invalid_input")
    if len(texts) > max_inputs:
        raise ApiError(400, f"'{param}' has {len(texts)} items; at most {max_inputs} per "
                       "request", param=param, code="too_many_inputs")
    for i, t in enumerate(texts):
        name = param if single else f"{param}[{i}]"
        if not t.strip():
            raise ApiError(400, f"'{name}' is empty; send text to embed or search for",
                           param=param, code="invalid_input")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") parses from JSON
            raise ApiError(400, f"'{name}' is not valid Unicode (a lone surrogate at "
                           f"character {exc.start}); send UTF-8 text", param=param,
                           code="invalid_input") from None
    return texts


def check_query_length(text: str, limit: int, param: str) -> None:
    """Refuse (413) a query longer than ``limit`` characters, naming the limit."""
    if len(text) > limit:
        raise ApiError(413, f"'{param}' has {len(text)} characters; a query may hold at most "
                       f"{limit} (shorten it, or start the server with a larger "
                       "--max-query-chars)", param=param, code="query_too_long")


def _queries(texts: list[str], limit: int, param: str, single: bool) -> None:
    for i, t in enumerate(texts):
        check_query_length(t, limit, param if single else f"{param}[{i}]")


def valid_task(value: Any, param: str) -> str:
    if not isinstance(value, str) or not value or "/" in value:
        raise ApiError(400, f"'{param}' must be a non-empty task name without '/'",
                       param=param, code="invalid_task")
    return value


def parse_embeddings(body: Any, *, task: str | None, max_inputs: int, dim: int,
                     max_query_chars: int = MAX_QUERY_CHARS) -> EmbeddingsRequest:
    """Validate an embeddings body. ``task`` comes from the ``/t/{task}`` route (None on
    ``/v1/embeddings``, where ``input_type: "query"`` plus an optional ``task`` field
    make a query request, global states only without ``task``)."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_body")
    if "input" not in body:
        raise ApiError(400, "'input' is required", param="input", code="missing_input")
    texts = _texts(body["input"], max_inputs)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ENCODINGS:
        raise ApiError(400, f"'encoding_format' must be one of {', '.join(ENCODINGS)}",
                       param="encoding_format", code="invalid_encoding_format")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool)
                             or dims != dim):
        raise ApiError(400, f"'dimensions' must be {dim} (this index's embedder) or left "
                       "out", param="dimensions", code="invalid_dimensions")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", param="model", code="invalid_model")
    input_type = body.get("input_type")
    if input_type is not None and input_type not in INPUT_TYPES:
        raise ApiError(400, "'input_type' must be 'query' or 'document'", param="input_type",
                       code="invalid_input_type")
    if task is None and input_type == "query":
        task = valid_task(body["task"], "task") if body.get("task") is not None else "_"
    elif task is None and body.get("task") is not None:
        raise ApiError(400, "'task' needs \"input_type\": \"query\" (documents are never "
                       "adapted)", param="task", code="invalid_task")
    elif task is not None and input_type == "document":
        raise ApiError(400, "a /t/{task} route embeds queries; send documents to "
                       "/v1/embeddings", param="input_type", code="invalid_input_type")
    if task is not None:  # queries (documents are bounded by the body's size alone)
        _queries(texts, max_query_chars, "input", isinstance(body["input"], str))
    return EmbeddingsRequest(texts, model or "", fmt, task, dims)


def count_tokens(texts: Sequence[str]) -> int:
    """``usage`` tokens: whitespace-separated words (an approximation of the model's
    tokenizer, which the wire format only reports)."""
    return sum(len(t.split()) for t in texts)


def encode_vector(v: np.ndarray, fmt: str) -> list[float] | str:
    """One embedding as OpenAI sends it: floats, or base64 of little-endian float32."""
    if fmt == "base64":
        return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
    return [float(f) for f in np.asarray(v, dtype=np.float32)]


def embeddings_body(vectors: np.ndarray, req: EmbeddingsRequest, model: str
                    ) -> dict[str, Any]:
    tokens = count_tokens(req.texts)
    return {"object": "list",
            "data": [{"object": "embedding", "index": i,
                      "embedding": encode_vector(v, req.encoding_format)}
                     for i, v in enumerate(vectors)],
            "model": req.model or model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@dataclass(frozen=True)
class SearchRequest:
    """A validated ``/v1/search`` body; ``task`` None when the body names none (the
    server then decides: :func:`tttembed.serve.routes.search_task`)."""

    texts: list[str]
    task: str | None
    k: int
    single: bool
    #: document fields each hit carries (``"include"``; empty: ids and scores only)
    include: tuple[str, ...] = ()
    #: who asks (``"session_id"``, ``"client_id"``, as UBI's query events carry them; ""
    #: when not given): logged with the search, what ``tttembed store forget`` finds
    session: str = ""
    client: str = ""


def parse_search(body: Any, *, max_inputs: int, max_k: int,
                 max_query_chars: int = MAX_QUERY_CHARS) -> SearchRequest:
    """``{"query": str | "queries": [str], "task": str?, "k": int = 10, "include":
    ["text", "title"]?, "session_id": str?, "client_id": str?}``."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_body")
    if ("query" in body) == ("queries" in body):
        raise ApiError(400, "give exactly one of 'query' (a string) and 'queries' (a list "
                       "of strings)", param="query", code="invalid_input")
    single = "query" in body
    value = body["query"] if single else body["queries"]
    if single and not isinstance(value, str):
        raise ApiError(400, "'query' must be a string", param="query", code="invalid_input")
    if not single and not isinstance(value, list):
        raise ApiError(400, "'queries' must be a list of strings", param="queries",
                       code="invalid_input")
    texts = _texts(value, max_inputs, "query" if single else "queries", single)
    _queries(texts, max_query_chars, "query" if single else "queries", single)
    task = valid_task(body["task"], "task") if body.get("task") is not None else None
    k = body.get("k", 10)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= max_k:
        raise ApiError(400, f"'k' must be an integer from 1 to {max_k}", param="k",
                       code="invalid_k")
    return SearchRequest(texts, task, k, single, parse_include(body.get("include", [])),
                         _user_id(body, "session_id"), _user_id(body, "client_id"))


#: The longest ``session_id`` / ``client_id`` a search may carry.
MAX_USER_ID_CHARS = 256


def _user_id(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_USER_ID_CHARS:
        raise ApiError(400, f"'{name}' must be a non-empty string of at most "
                       f"{MAX_USER_ID_CHARS} characters", param=name, code="invalid_input")
    return value


#: The document fields ``/v1/search`` may include in its hits.
SEARCH_INCLUDE = ("text", "title")


def parse_include(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(400, "'include' must be a list of document fields (any of "
                       f"{', '.join(SEARCH_INCLUDE)})", param="include", code="invalid_include")
    unknown = [v for v in value if v not in SEARCH_INCLUDE]
    if unknown:
        raise ApiError(400, f"'include' names {unknown[0]!r}: the document fields are "
                       f"{', '.join(SEARCH_INCLUDE)}", param="include", code="invalid_include")
    return tuple(dict.fromkeys(value))
