"""The closed loop's routes: ``POST /v1/feedback`` (people's labels for served documents),
``GET /v1/loop`` (status JSON) and ``GET /dashboard`` (the same status as a page).

A feedback body is one object or a list of them, each ``{"search_id" | "query" (+
"task"), "doc_id", "label"}`` with the label in [0, 1]. The whole body is validated
before anything is stored (an unknown search id is a 404, a document the index does not
hold a 422, a bad label a 400: nothing of that body is kept); each label is stored once
per (search id or query, document), so a retried POST stores nothing twice; 202 says
how many were new.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from tttembed.loop.forget import MAX_ID_CHARS
from tttembed.serve.routes import json_response, read_body
from tttembed.serve.wire import ApiError, check_query_length, valid_task

if TYPE_CHECKING:
    from tttembed.loop.store import Feedback
    from tttembed.serve.service import Service


def _need_loop(svc: Service) -> None:
    if svc.store is None or svc.states.versions is None:
        raise ApiError(404, "this server keeps no feedback and runs no loop (start it with "
                       "--registry DIR, and --learn to learn from it)", code="loop_disabled")


def _label(item: dict[str, Any], i: int) -> float:
    value = item.get("label")
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= 1:
        raise ApiError(400, f"feedback[{i}].label must be a number in [0, 1], got "
                       f"{value!r}", param="label", code="invalid_label")
    return float(value)


def _one(svc: Service, item: Any, i: int) -> Feedback:
    from tttembed.loop.store import Feedback

    if not isinstance(item, dict):
        raise ApiError(400, f"feedback[{i}] must be an object", code="invalid_feedback")
    label = _label(item, i)
    doc = item.get("doc_id")
    if not isinstance(doc, str) or doc not in svc.doc_ids:
        raise ApiError(422, f"feedback[{i}].doc_id {doc!r} is not a document of this index",
                       param="doc_id", code="unknown_doc_id")
    sid, task, query = item.get("search_id"), item.get("task"), item.get("query")
    if sid is not None:
        logged = svc.find_search(str(sid))
        if logged is None:
            raise ApiError(404, f"feedback[{i}].search_id {sid!r} is not a search this "
                           "loop logged", param="search_id", code="unknown_search_id")
        if task is not None and task != logged.task:
            raise ApiError(422, f"feedback[{i}].task {task!r} is not the task of search "
                           f"{sid!r} ({logged.task!r})", param="task", code="task_mismatch")
        return Feedback(logged.task, logged.query, doc, label, logged.search_id, time.time())
    if not isinstance(query, str) or not query.strip() or task is None:
        raise ApiError(400, f"feedback[{i}] needs a search_id, or a query with its task",
                       code="invalid_feedback")
    check_query_length(query, svc.config.limits.max_query_chars, f"feedback[{i}].query")
    # a task as /v1/search takes it: "/chain" (the chain route's, reserved) is refused
    return Feedback(valid_task(task, f"feedback[{i}].task"), query, doc, label, "",
                    time.time())


async def feedback(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    _need_loop(svc)
    body = await read_body(request, svc.config.limits.max_body_bytes)
    items = body if isinstance(body, list) else [body]
    if not items or len(items) > svc.config.limits.max_inputs:
        raise ApiError(400, f"send 1 to {svc.config.limits.max_inputs} feedback objects",
                       code="invalid_feedback")

    def work() -> tuple[int, int]:
        rows = [_one(svc, item, i) for i, item in enumerate(items)]
        return len(rows), svc.store.add_feedback(rows)

    received, stored = await run_in_threadpool(work)
    info.update(inputs=received, stored=stored)
    return json_response({"object": "feedback", "received": received, "stored": stored,
                          "duplicates": received - stored}, 202)


async def forget_route(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    """``POST /admin/forget`` ``{"session_id" | "client_id": str, "dry_run": bool?}``: as
    ``tttembed store forget`` (:mod:`tttembed.loop.forget`); only on a server started with
    ``--api-key-env`` (an open server deletes nothing on request)."""
    _need_loop(svc)
    if svc._key is None:
        raise ApiError(403, "/admin/forget deletes a user's data: it is enabled only on a "
                       "server started with --api-key-env (or run `tttembed store forget "
                       "STORE --session ID`)", type="permission_error", code="admin_disabled")
    body = await read_body(request, svc.config.limits.max_body_bytes)
    if not isinstance(body, dict) or ("session_id" in body) == ("client_id" in body):
        raise ApiError(400, "give exactly one of 'session_id' and 'client_id' (a string)",
                       code="invalid_input")
    name = "session_id" if "session_id" in body else "client_id"
    value, dry = body[name], body.get("dry_run", False)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ApiError(400, f"'{name}' must be a non-empty string of at most {MAX_ID_CHARS} "
                       "characters", param=name, code="invalid_input")
    if not isinstance(dry, bool):
        raise ApiError(400, "'dry_run' must be true or false", param="dry_run",
                       code="invalid_input")
    who = {"session": value} if name == "session_id" else {"client": value}
    report = await run_in_threadpool(lambda: svc.store.forget(**who, dry_run=dry))
    if not report.found:
        raise ApiError(404, f"no search or event of that {name} is in the store (nothing "
                       "was deleted)", param=name, code="unknown_user")
    info.update(forgot=report.searches, dry_run=dry)
    return json_response({"object": "forget", **report.to_dict()})


def _status(svc: Service) -> dict[str, Any]:
    """The loop's status and what this replica serves. While the registry cannot be
    read, the status says so (``registry_error``) beside what is served: never a 500."""
    from tttembed.core.errors import TTTEmbedError
    from tttembed.loop.status import loop_status

    assert svc.states.versions is not None
    try:
        status = loop_status(svc.states.versions, svc.store)
    except (TTTEmbedError, OSError) as exc:
        status = {"version": None, "registry_error": " ".join(str(exc).split())}
    follow = svc.follow.as_dict()
    status["following"] = follow["following"]
    status["serving"] = {"version": svc.states.current.version,
                         "generation": svc.states.current.generation,
                         "replica": svc.replica, **follow}
    from tttembed.serve.events import click_status

    try:
        status["clicks"] = click_status(svc.store)
    except (TTTEmbedError, OSError) as exc:  # the store restarting: said, never a 500
        status["clicks"] = {"error": " ".join(str(exc).split())}
    chain = svc.chain.source.registry if svc.chain is not None else None
    if chain is not None:  # the chain learner's record: frozen and why, its last cycle
        from tttembed.loop.status import chain_learner

        status["chain_learner"] = chain_learner(chain)
    if svc.pruner is not None:  # what this replica keeps, and its prunes so far
        status["serving"]["retention"] = svc.pruner.status()
    held = svc.store_status()  # the dropped count stays once the store is back
    status["serving"].update({k: v for k, v in held.items() if v})
    return status


async def loop_route(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    _need_loop(svc)
    return json_response(await run_in_threadpool(_status, svc))


async def dashboard(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    from tttembed.serve.dashboard import render_dashboard

    _need_loop(svc)
    status = await run_in_threadpool(_status, svc)
    return HTMLResponse(render_dashboard(status))


__all__ = ["dashboard", "feedback", "loop_route"]
