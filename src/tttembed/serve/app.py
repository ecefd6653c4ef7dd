"""The Starlette app: routes, auth, body limits, metrics and access logs around the
:class:`~tttembed.serve.engine.Engine` and the :class:`~tttembed.serve.states.ServedStates`.

Every route handler runs inside :func:`_endpoint`, which checks the bearer key (all routes
but ``/healthz``), turns :class:`~tttembed.serve.wire.ApiError` into OpenAI-shaped 4xx
bodies (a feedback store that cannot be reached into a 503 with ``Retry-After``, one that
refuses a write into a 503, a failing upstream embedder into a 502, each with one log
line; anything unexpected into a 500 with its traceback in the log), counts the request and writes
one JSON access-log line (never a header, so never the key). The model runs on its own
thread (:class:`~tttembed.serve.engine.Batcher`): an embeddings request of a few texts
awaits its rows on the event loop and is adapted and rendered there (tens of
microseconds), and so does a search of a few texts, whose index call runs on the search
thread (:class:`~tttembed.serve.searcher.Searcher`); larger requests and anything that
writes the traffic log run in a worker thread. The event loop never waits for the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tttembed.core.errors import BackendError, StoreRefused, StoreUnavailable
from tttembed.core.http import for_command, upstream_policy
from tttembed.embed.base import Embedder
from tttembed.serve import chain_routes, events, loop_routes, routes
from tttembed.serve.config import ServeConfig
from tttembed.serve.logs import access_log, configure_logging, log
from tttembed.serve.routes import json_response
from tttembed.serve.service import Service
from tttembed.serve.wire import ApiError, error_body

Handler = Callable[[Request, dict[str, Any]], Awaitable[Response]]


def _log_access(request: Request, route: str, status: int, seconds: float,
                info: dict[str, Any]) -> None:
    if access_log.isEnabledFor(logging.INFO):
        client = request.client.host if request.client else ""
        access_log.info(json.dumps({"method": request.method, "path": request.url.path,
                                    "route": route, "status": status,
                                    "ms": round(1000 * seconds, 3), "client": client, **info},
                                   ensure_ascii=False))


#: Seconds between two log lines of a feedback store that cannot be reached.
STORE_WARN_S = 10.0
_store_warned = [0.0]


def _store_unavailable(svc: Service, route: str, exc: StoreUnavailable) -> Response:
    """A 503 with ``Retry-After`` for a request that needed the feedback store while it
    cannot be reached (nothing of the request was kept), logged in one line at most
    every :data:`STORE_WARN_S` seconds, without a traceback."""
    svc.metrics.error(route, "store_unavailable")
    reason = " ".join(str(exc).split())
    if time.monotonic() - _store_warned[0] >= STORE_WARN_S:
        _store_warned[0] = time.monotonic()
        log.warning("%s: 503, %s", route, reason)
    response = json_response(error_body(f"{reason}; retry shortly", "service_unavailable",
                                        code="store_unavailable"), 503)
    response.headers["Retry-After"] = "1"
    return response


#: (status, error type, code, what a client may do) of a server error that is no bug: the
#: store refusing a write, the upstream embedder failing. One log line each (at most every
#: :data:`STORE_WARN_S` seconds per code), never a traceback.
_NOT_A_BUG: dict[type[Exception], tuple[int, str, str, str]] = {
    StoreRefused: (503, "service_unavailable", "store_refused",
                   "the server log has the store's reason"),
    BackendError: (502, "upstream_error", "upstream_failed", "retry later"),
}
_warned: dict[str, float] = {}


def _not_a_bug(svc: Service, route: str, exc: Exception) -> Response:
    status, kind, code, advice = next(v for t, v in _NOT_A_BUG.items() if isinstance(exc, t))
    svc.metrics.error(route, code)
    reason = " ".join(str(for_command(exc, "serve", upstream_policy(
        svc.config.upstream_deadline_s))).split())  # serve's own bounds, not --timeout
    if time.monotonic() - _warned.get(code, -STORE_WARN_S) >= STORE_WARN_S:
        _warned[code] = time.monotonic()
        log.error("%s: %d, %s", route, status, reason)
    return json_response(error_body(f"{reason} ({advice})", kind, code=code), status)


def _endpoint(svc: Service, route: str, handler: Handler, auth: bool = True
              ) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        t0 = time.perf_counter()
        info: dict[str, Any] = {}
        try:
            if auth and not svc.authorized(request):
                raise ApiError(401, "missing or incorrect API key (send 'Authorization: "
                               "Bearer KEY')", code="invalid_api_key")
            response = await handler(request, info)
        except ApiError as exc:
            svc.metrics.error(route, exc.code or exc.type)
            response = json_response(exc.body(), exc.status)
        except StoreUnavailable as exc:  # the database restarting: a retry will do
            response = _store_unavailable(svc, route, exc)
        except (StoreRefused, BackendError) as exc:  # no bug, so no traceback: one line
            response = _not_a_bug(svc, route, exc)
        except Exception as exc:  # never a traceback on the wire
            log.exception("%s failed", route)
            svc.metrics.error(route, "server_error")
            response = json_response(error_body(f"internal error ({type(exc).__name__})",
                                        "server_error"), 500)
        seconds = time.perf_counter() - t0
        svc.metrics.observe(request.method, route, response.status_code, seconds)
        _log_access(request, route, response.status_code, seconds, info)
        return response

    return endpoint


#: (path, route name, handler, methods, needs the key)
ROUTES: tuple[tuple[str, str, Any, list[str], bool], ...] = (
    ("/healthz", "healthz", routes.healthz, ["GET"], False),
    ("/metrics", "metrics", routes.metrics, ["GET"], True),
    ("/v1/embeddings", "embeddings", routes.embeddings, ["POST"], True),
    ("/t/{task}/v1/embeddings", "task_embeddings", routes.embeddings, ["POST"], True),
    ("/v1/search", "search", routes.search_route, ["POST"], True),
    ("/v1/chain/search", "chain_search", chain_routes.chain_search_route, ["POST"], True),
    ("/v1/states", "states", routes.states, ["GET"], True),
    ("/v1/models", "models", routes.models, ["GET"], True),
    ("/t/{task}/v1/models", "models", routes.models, ["GET"], True),
    ("/admin/reload", "reload", routes.reload, ["POST"], True),
    ("/admin/forget", "forget", loop_routes.forget_route, ["POST"], True),
    ("/v1/feedback", "feedback", loop_routes.feedback, ["POST"], True),
    ("/v1/events", "events", events.events_route, ["POST"], True),
    ("/v1/loop", "loop", loop_routes.loop_route, ["GET"], True),
    ("/dashboard", "dashboard", loop_routes.dashboard, ["GET"], True),
)


def _on_sighup(svc: Service) -> None:
    """SIGHUP: reload in a thread (the event loop keeps serving)."""
    loop = asyncio.get_running_loop()
    task = loop.run_in_executor(None, svc.reload)
    svc.background.add(task)
    task.add_done_callback(svc.background.discard)


def _lifespan(svc: Service) -> Callable[[Starlette], Any]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, _on_sighup, svc)
            hup = True
        except (RuntimeError, ValueError, NotImplementedError, AttributeError):
            hup = False  # not the main thread (tests) or no SIGHUP on this platform
        log.info("serving %s (%d documents, %d state file(s), generation %d)%s",
                 svc.config.index, len(svc.index), len(svc.states.current.states),
                 svc.states.current.generation, "; SIGHUP reloads" if hup else "")
        svc.watch_registry()
        try:
            yield
        finally:
            svc.stop_watching()
            await asyncio.get_running_loop().run_in_executor(None, svc.close_traffic)
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)
            log.info("stopped")

    return lifespan


def build_app(config: ServeConfig, embedder: Embedder | None = None) -> Starlette:
    """The app, with index, model and states loaded (errors raise here, not later)."""
    svc = Service(config, embedder)
    table = [Route(path, _endpoint(svc, name, _bind(handler, svc), auth), methods=methods)
             for path, name, handler, methods, auth in ROUTES]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        svc.metrics.observe(request.method, "unmatched", status, 0.0)
        kind = "not_found" if status == 404 else "method_not_allowed"
        return json_response(error_body(f"{request.method} {request.url.path}: "
                                        f"{kind.replace('_', ' ')}", code=kind), status)

    app = Starlette(routes=table, lifespan=_lifespan(svc),
                    exception_handlers={404: not_found, 405: not_found})
    app.state.service = svc
    return app


def _bind(handler: Any, svc: Service) -> Handler:
    async def bound(request: Request, info: dict[str, Any]) -> Response:
        return await handler(svc, request, info)

    return bound


def app_from_env() -> Starlette:
    """uvicorn's factory in worker processes (``--workers N``)."""
    config = ServeConfig.from_env()
    configure_logging(config.listen.log_level)
    return build_app(config)
