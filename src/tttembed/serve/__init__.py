"""``tttembed serve``: an OpenAI-compatible embeddings service that puts learned states in
front of live traffic. An app changes its query side's ``base_url`` and nothing else.

Routes (all JSON; errors in OpenAI's shape ``{"error": {"message", "type", "param",
"code"}}``):

- ``POST /v1/embeddings``: documents, the index embedder's vectors unchanged (the
  ``input_type: "query"`` and ``task`` extension fields make it a query request);
- ``POST /t/{task}/v1/embeddings``: queries of ``task``, ``unit(x + alpha v)`` with the most
  specific state (query-wise by query text, then task, then global; ``_`` = global
  only);
- ``POST /v1/search``: ids and scores over the index, adapted like ``tttembed search``;
- ``GET /v1/states``, ``POST /admin/reload`` (and SIGHUP), ``GET /healthz``, ``GET /metrics``.

Query-wise states are keyed by ``task`` and a digest of the normalised query text, so a
request's text finds its state directly (the same lookup as ``search`` and MTEB); query
files given with ``queries`` (``--query-source``) only name tasks and ids for reports.

In-process apps use :mod:`tttembed.integrations.adapters` (LangChain / LlamaIndex embeddings:
queries adapted, documents raw) instead of a server.

Importing this package is light: Starlette and uvicorn load inside :func:`create_app` and
:func:`run_server`.
"""

from __future__ import annotations

from typing import Any

from tttembed.serve.config import ServeConfig


def create_app(config: ServeConfig | None = None, /, *, embedder: Any = None,
               **options: Any) -> Any:
    """The Starlette app for ``config`` (or ``ServeConfig.from_options(**options)``: flat
    keywords, each to its group); ``embedder``
    replaces the index's own (it must have the index's identity).

        >>> from tttembed.serve import create_app
        >>> app = create_app(index="idx/demo", states=["task.npz"])
    """
    from tttembed.serve.app import build_app

    return build_app(config if config is not None else ServeConfig.from_options(**options),
                     embedder=embedder)


def run_server(config: ServeConfig | None = None, /, **options: Any) -> None:
    """Run the service under uvicorn until SIGINT/SIGTERM (in-flight requests finish).
    (Not named ``serve``: ``tttembed.serve`` is this package.)

        >>> from tttembed.serve import run_server
        >>> run_server(index="idx/demo", states=["task.npz"], port=8000)
    """
    from tttembed.serve.run import run

    run(config if config is not None else ServeConfig.from_options(**options))


__all__ = ["ServeConfig", "create_app", "run_server"]
