"""The route handlers. Each takes the shared :class:`~tttembed.serve.app.Service`, the
request and an ``info`` dict (what the access log adds to its line)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from tttembed.serve.engine import Result
from tttembed.serve.traffic import new_search_id
from tttembed.serve.wire import (
    ApiError,
    SearchRequest,
    embeddings_body,
    parse_embeddings,
    parse_search,
)
from tttembed.ttt.snapshot import GLOBAL_ONLY, RAW_ONLY, Snapshot

if TYPE_CHECKING:
    from tttembed.serve.service import Service


def is_json_type(content_type: str | None) -> bool:
    """Whether a Content-Type announces JSON (``application/json``, ``application/*+json``,
    any parameters); a missing one counts as JSON, as FastAPI reads it."""
    if not content_type:
        return True
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


async def read_body(request: Request, limit: int) -> Any:
    """The JSON body, refused (413) past ``limit`` bytes whatever the headers say, and
    (415) when its Content-Type is not JSON (none at all is read as JSON, as FastAPI
    does): every route that takes a body reads it here."""
    kind = request.headers.get("content-type")
    if not is_json_type(kind):
        raise ApiError(415, f"Content-Type {kind!r} is not JSON: send the body as JSON with "
                       "the header Content-Type: application/json",
                       code="unsupported_media_type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON", code="invalid_json") from None
    except RecursionError:  # client-made: a body nested thousands of levels deep
        raise ApiError(400, "the request body is nested too deeply", code="invalid_json") \
            from None


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), status,
                    headers=headers, media_type="application/json")


def state_headers(res: Result) -> dict[str, str]:
    return {"x-tttembed-generation": str(res.generation),
            "x-tttembed-states": ",".join(f"{Path(k).name}={v}" for k, v in res.hits.items())
            .encode("ascii", "backslashreplace").decode("ascii")}


async def healthz(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    snap = svc.states.current
    body: dict[str, Any] = {"status": "ok", "generation": snap.generation,
                            "states": len(snap.states), "documents": len(svc.index)}
    if svc.states.versions is not None:
        follow = svc.follow.as_dict()
        body.update(status="ok" if follow["following"] else "degraded",
                    version=snap.version, following=follow["following"],
                    follow_error=follow["error"])
    if svc.chain is not None:  # --chain: the encoder served, and whether it follows
        body["chain"] = svc.chain.source.status()
        if body["chain"]["error"] is not None:
            body["status"] = "degraded"
    store_error = svc.store_status()["log_error"]
    if store_error is not None:  # searches held in memory, or the store unreachable
        body.update(status="degraded", store_error=store_error)
    return json_response(body)


async def metrics(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    return PlainTextResponse(svc.metrics.render(),
                             media_type="text/plain; version=0.0.4; charset=utf-8")


def served_task(svc: Service, snap: Snapshot, task: str | None) -> str | None:
    """The task a request is served as. A task that no state or query file names (a typo
    in an app's base_url) is a 404 listing the known tasks, unless the server was started
    with ``--unknown-task global|raw``; with no task-named state at all, every task gets
    the global states (nothing can be dropped)."""
    if task is None or task == GLOBAL_ONLY or not snap.known_task_set \
            or task in snap.known_task_set:
        return task
    known = snap.known_tasks
    policy = svc.config.unknown_task
    if policy == "global":
        return GLOBAL_ONLY
    if policy == "raw":
        return RAW_ONLY
    shown = ", ".join(known[:20]) + (f" (+{len(known) - 20} more)" if len(known) > 20 else "")
    raise ApiError(404, f"unknown task {task!r}: this server's states and query files name "
                   f"{shown}; '_' is global states only (start the server with "
                   "--unknown-task global|raw to serve unknown tasks anyway)",
                   param="task", code="unknown_task")


def search_task(snap: Snapshot, task: str | None) -> str:
    """The task a search without ``task`` is served as: the one task the states and query
    files name, '_' (global states) when they name none; several are a 400 listing them
    (the answer's ``task`` says which was used)."""
    if task is not None:
        return task
    known = snap.known_tasks
    if len(known) > 1:
        shown = ", ".join(known[:20]) + (f" (+{len(known) - 20} more)" if len(known) > 20
                                         else "")
        raise ApiError(400, f"'task' is required: this server's states and query files name "
                       f"{shown}; send one of them, or '_' for the global states only",
                       param="task", code="missing_task")
    return known[0] if known else GLOBAL_ONLY


#: Requests of at most this many texts (and no traffic log to write) are adapted and
#: rendered on the event loop, their model rows awaited there; larger ones in a thread.
INLINE_TEXTS = 32


async def embeddings(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    route_task = request.path_params.get("task")
    body = await read_body(request, svc.config.limits.max_body_bytes)
    req = parse_embeddings(body, task=route_task, max_inputs=svc.config.limits.max_inputs,
                           dim=svc.index.dim,
                           max_query_chars=svc.config.limits.max_query_chars)
    snap = svc.states.current  # one snapshot for the whole request
    info.update(inputs=len(req.texts), task=req.task, generation=snap.generation)
    task = served_task(svc, snap, req.task)

    def work() -> tuple[bytes, Any]:
        res = svc.engine.embed(req.texts, task, snap)
        if svc.store is not None and req.task is not None:
            log_traffic(svc, snap, req.task, req.texts, None, None)
        return _render(embeddings_body(res.vectors, req, svc.model)), res

    if svc.store is None and len(req.texts) <= INLINE_TEXTS:
        res = await svc.engine.embed_async(req.texts, task, snap)
        content = _render(embeddings_body(res.vectors, req, svc.model))
    else:
        content, res = await run_in_threadpool(work)
    info["states"] = res.hits
    svc.metrics.hit(res.hits, "embeddings", len(req.texts))
    return Response(content, 200, headers=state_headers(res),
                    media_type="application/json")


def _render(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode()


async def search_route(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    body = await read_body(request, svc.config.limits.max_body_bytes)
    limits = svc.config.limits
    req = parse_search(body, max_inputs=limits.max_inputs, max_k=limits.max_k,
                       max_query_chars=limits.max_query_chars)
    snap = svc.states.current
    name = search_task(snap, req.task)
    req = replace(req, task=name)  # the answer's "task": the one used
    info.update(inputs=len(req.texts), task=name, generation=snap.generation, k=req.k)
    task = served_task(svc, snap, name) or name  # a search always names a task

    # a few texts: the model rows and the index hits awaited from their threads (engine)
    found = await svc.engine.search_async(req.texts, task, req.k, snap) \
        if len(req.texts) <= INLINE_TEXTS else None

    def work() -> tuple[bytes, Any]:
        res = found if found is not None else svc.engine.search(req.texts, task, req.k, snap)
        body = _search_body(svc, req, res)
        body["version"] = snap.version
        if req.include:
            svc.documents.attach(body["data"], req.include)
        if svc.store is not None:
            sids = [new_search_id() for _ in req.texts]
            marks = interleave_results(svc, snap, task, req, body["data"], sids)
            log_traffic(svc, snap, name, req.texts, [d["ids"] for d in body["data"]],
                        body["data"], sids=sids, marks=marks, who=(req.session, req.client))
        return _render(body), res

    inline = found is not None and svc.store is None and not req.include
    content, res = work() if inline else await run_in_threadpool(work)
    info["states"] = res.hits
    svc.metrics.hit(res.hits, "search", len(req.texts))
    return Response(content, 200, headers=state_headers(res),
                    media_type="application/json")


def interleave_results(svc: Service, snap: Snapshot, task: str, req: SearchRequest,
                       data: list[dict[str, Any]], sids: Sequence[str]) -> list[str]:
    """``--interleave``: the drawn searches' results become a team-draft interleaving of
    the served list and the candidate's (searched only for those); the interventions to
    log per search ("" where not interleaved)."""
    from tttembed.loop.clicks.intervention import interleave_drawn
    from tttembed.serve.explore import interleave_item

    cand = snap.candidate
    fraction = svc.config.loop.interleave
    drawn = [i for i, sid in enumerate(sids) if interleave_drawn(sid, fraction)]
    marks = [""] * len(sids)
    if cand is None or not drawn:
        return marks
    res = svc.engine.search([req.texts[i] for i in drawn], task, req.k, cand)
    rows, scores = np.asarray(res.rows), np.asarray(res.scores)
    ids = svc.index.doc_ids
    for j, i in enumerate(drawn):
        keep = [c for c, r in enumerate(rows[j]) if r >= 0]
        other = {"ids": [ids[rows[j][c]] for c in keep],
                 "scores": [float(scores[j][c]) for c in keep]}
        marks[i] = interleave_item(sids[i], data[i], other, fraction, cand.version or "")
    return marks


def log_traffic(svc: Service, snap: Snapshot, task: str, texts: Sequence[str],
                lists: Sequence[Sequence[str]] | None, data: list[dict[str, Any]] | None,
                *, sids: Sequence[str] | None = None, marks: Sequence[str] | None = None,
                who: tuple[str, str] = ("", "")) -> None:
    """Log each served query in the store (the closed loop's traffic); a search's
    results gain their ``search_id``. Embeddings traffic logs no list (the learner runs
    the base retrieval itself). ``marks``: interventions already made (interleaving);
    RandPair (``--explore``) may swap the others. ``who``: the (session id, client id)
    the request carried, logged with each search."""
    from tttembed.loop.store import SearchLog
    from tttembed.serve.explore import apply_randpair

    now = time.time()
    sids = list(sids) if sids is not None else [new_search_id() for _ in texts]
    done = list(marks) if marks is not None else [""] * len(sids)
    marks = [done[i] or apply_randpair(sid, item, svc.config.loop.explore)
             for i, (sid, item) in enumerate(zip(sids, data or ()))]  # as shown, and how
    shown = [d["ids"] for d in data] if data else lists
    rows = [SearchLog(sids[i], task, text, now + 1e-6 * i, snap.version,
                      tuple(shown[i]) if shown is not None else (),
                      "search" if lists is not None else "embeddings", svc.replica,
                      marks[i] if marks else "", *who)
            for i, text in enumerate(texts)]
    svc.log_searches(rows)
    for row, item in zip(rows, data or ()):
        item["search_id"] = row.search_id


def _search_body(svc: Service, req: SearchRequest, res: Any) -> dict[str, Any]:
    ids = svc.index.doc_ids
    data = []
    for i, text in enumerate(req.texts):
        keep = [j for j, r in enumerate(res.rows[i]) if r >= 0]
        data.append({"object": "search_result", "index": i, "query": text,
                     "ids": [ids[res.rows[i][j]] for j in keep],
                     "scores": [float(res.scores[i][j]) for j in keep]})
    return {"object": "list", "data": data, "task": req.task, "k": req.k,
            "model": svc.model, "generation": res.generation, "states": res.hits}


async def states(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    snap = svc.states.current
    return json_response({"object": "list", "generation": snap.generation,
                         "loaded_at": snap.loaded_at, "last_reload": svc.states.last_reload,
                         "index": svc.config.index, "identity": svc.index.identity,
                         "fingerprint": svc.index.manifest.get("corpus_fingerprint", ""),
                         "query_texts": {t: len(m) for t, m in snap.qids.items()},
                         "data": snap.describe()})


async def reload(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    swapped, snap, error = await run_in_threadpool(svc.reload)
    info.update(generation=snap.generation, swapped=swapped)
    if not swapped:
        raise ApiError(422, f"reload refused, generation {snap.generation} kept: {error}",
                       type="state_error", code="reload_refused")
    return json_response({"reloaded": True, "generation": snap.generation,
                         "data": snap.describe()})


async def models(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    return json_response({"object": "list", "data": [
        {"id": svc.model, "object": "model", "created": 0, "owned_by": "tttembed"}]})


__all__ = ["embeddings", "healthz", "metrics", "models", "reload",
           "search_route", "states"]
