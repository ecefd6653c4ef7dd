"""``POST /v1/chain/search`` (``tttembed serve --chain ENCODER``): chain retrieval for one
question, the ranking ``tttembed chain search`` gives it.

Body ``{"question": str, "max_hops": int, "beam": int, "top_k": int, "include": [str]}``
(defaults: the encoder's T, 1, 10, none; ``include`` as ``/v1/search``'s: ``"text"``,
``"title"`` added to each of ``data``'s passages, read from ``--corpus`` or the index's
recorded source). Answer ``{"data": [{"id", "score"}...], "hops": [{"id", "score"}...],
"encoder", "version", "search_id"}``: ``data`` the final ranking (the chain's passages in
hop order, then every other passage by the best similarity it got at any step), scored as
``tttembed chain search --out`` scores its run (``1 / (1 + rank)``, rank from 0); ``hops``
the chain in hop order with the similarity each passage was picked with; ``version`` the
registry version of the encoder (null outside a registry); ``search_id`` names the search
for ``/v1/events`` and ``/v1/feedback`` (logged, with the final list, when the server has a
store: ``--registry``).

Bad input is a 400 (404 without ``--chain``) with the reason and the fix, checked before
anything runs or is logged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tttembed.serve.chain_engine import Ask, ChainEncoder, Found
from tttembed.serve.routes import json_response, read_body
from tttembed.serve.wire import ApiError, check_query_length, parse_include

if TYPE_CHECKING:
    from tttembed.serve.service import Service

#: The most chain steps and the widest beam a request may ask for, and the longest question.
MAX_HOPS = 10
MAX_BEAM = 16
MAX_QUESTION_CHARS = 4000
#: The most states one request may have encoded (1 + beam x (max_hops - 1)): the work a
#: chain search costs grows with it, and one client must not hold a server cheaply
#: (greedy at 10 hops: 10; beam 4 at 4 hops: 13; beam 4 at 10 hops: 37).
MAX_STATES = 40


@dataclass(frozen=True)
class ChainRequest:
    question: str
    max_hops: int
    beam: int
    top_k: int
    include: tuple[str, ...] = ()


def _int(body: Mapping[str, Any], name: str, default: int, low: int, high: int,
         why: str) -> int:
    value = body.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        kind = {str: "a string", bool: "a boolean", float: "a number with a fraction",
                type(None): "null"}.get(type(value), f"a JSON {type(value).__name__}")
        raise ApiError(400, f"'{name}' must be an integer from {low} to {high} ({why}), "
                       f"not {kind}: got {_shown(value)}; send it without quotes, e.g. "
                       f"\"{name}\": {default}", param=name, code=f"invalid_{name}")
    if not low <= value <= high:
        raise ApiError(400, f"'{name}' must be an integer from {low} to {high} ({why}), got "
                       f"{str(value)[:40]}", param=name, code=f"invalid_{name}")
    return value


def _shown(value: Any) -> str:
    import json

    return json.dumps(value)[:40]


def _question(body: Mapping[str, Any]) -> str:
    value = body.get("question")
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "'question' must be a non-empty string: send the question to "
                       "retrieve a chain of passages for", param="question",
                       code="invalid_question")
    if len(value) > MAX_QUESTION_CHARS:
        raise ApiError(400, f"'question' has {len(value)} characters; at most "
                       f"{MAX_QUESTION_CHARS} (send the question alone, not the passages)",
                       param="question", code="invalid_question")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "'question' holds a lone surrogate (not valid Unicode); send "
                       "UTF-8 text", param="question", code="invalid_question") from None
    return value


def parse_chain(body: Any, *, steps: int, documents: int, max_k: int) -> ChainRequest:
    """Validate a chain search body (``steps``: the encoder's T, the default hops;
    ``documents``: the index's size, the most ``top_k`` can be with ``max_k``)."""
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object: {\"question\": ...}",
                       code="invalid_body")
    unknown = sorted(set(body) - {"question", "max_hops", "beam", "top_k", "include"})
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0]!r}: a chain search takes question, "
                       "max_hops, beam, top_k and include", param=unknown[0],
                       code="unknown_field")
    question = _question(body)
    hops = _int(body, "max_hops", steps, 1, MAX_HOPS, "the chain's steps; default the "
                "encoder's")
    beam = _int(body, "beam", 1, 1, MAX_BEAM, "1 is greedy")
    states = 1 + beam * (hops - 1)
    if states > MAX_STATES:
        raise ApiError(400, f"'max_hops' {hops} with 'beam' {beam} asks for {states} state "
                       f"encodings (1 + beam x (max_hops - 1)); one request may ask for at "
                       f"most {MAX_STATES}: lower max_hops or beam", param="beam",
                       code="chain_too_costly")
    k_max = min(documents, max_k)
    top_k = _int(body, "top_k", min(10, k_max), 1, k_max,
                 f"the index holds {documents} passages")
    return ChainRequest(question, hops, beam, top_k, parse_include(body.get("include", [])))


def _body(svc: Service, found: Found, encoder: ChainEncoder, sid: str) -> dict[str, Any]:
    ids = svc.index.doc_ids
    return {"data": [{"id": ids[r], "score": 1.0 / (1 + pos)}
                     for pos, r in enumerate(found.ranking)],
            "hops": [{"id": ids[r], "score": s} for r, s in found.hops],
            "encoder": encoder.name, "version": encoder.version, "search_id": sid}


def _log(svc: Service, req: ChainRequest, body: dict[str, Any],
         encoder: ChainEncoder) -> None:
    from tttembed.chain.traffic import chain_kind
    from tttembed.loop.rows import CHAIN_TASK, SearchLog

    kind = chain_kind(len(body["hops"]), encoder.settings.max_seq_length,
                      encoder.settings.form)
    svc.log_searches([SearchLog(body["search_id"], CHAIN_TASK, req.question, time.time(),
                                body["version"], tuple(d["id"] for d in body["data"]),
                                kind, svc.replica)])


async def chain_search_route(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    chain = svc.chain
    if chain is None:
        raise ApiError(404, "this server has no chain route: start it with --chain ENCODER "
                       "(base, a checkpoint folder or a chain registry)",
                       code="chain_disabled")
    body = await read_body(request, svc.config.limits.max_body_bytes)
    encoder = chain.source.current  # one encoder for the whole request
    req = parse_chain(body, steps=encoder.steps, documents=len(svc.index),
                      max_k=svc.config.limits.max_k)
    check_query_length(req.question, svc.config.limits.max_query_chars, "question")
    found = (await chain.worker.submit_async([Ask(req.question, req.top_k)],
                                             (encoder, req.max_hops, req.beam)))[0]
    out = _body(svc, found, encoder, uuid.uuid4().hex)
    if req.include:
        texts = await run_in_threadpool(svc.documents.fields, [d["id"] for d in out["data"]],
                                        req.include)
        for item, doc in zip(out["data"], texts):
            item.update({f: doc[f] for f in req.include})
    if svc.store is not None:
        await run_in_threadpool(_log, svc, req, out, encoder)
    info.update(max_hops=req.max_hops, beam=req.beam, top_k=req.top_k,
                version=encoder.version)
    return json_response(out)


__all__ = ["ChainRequest", "chain_search_route", "parse_chain"]
