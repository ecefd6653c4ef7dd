"""One entry to the state registry: a folder path or a ``postgresql://`` URL."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.registry.base import StateRegistry


def open_registry(spec: str | Path, *, create: bool = False,
                  index: Mapping[str, Any] | None = None, cache: str | Path | None = None,
                  offline_ok: bool = False) -> StateRegistry:
    """The registry ``spec`` names: ``postgresql://USER@HOST:PORT/DB`` (or
    ``postgres://``; ``cache`` its local copy, ``offline_ok`` open from that copy while
    the database is down) or a folder (created with ``create``; ``index``: the index
    record it must match)."""
    from tttembed.registry.postgres import is_url

    if is_url(spec):  # a backend by its scheme (third parties: tttembed.registries)
        from tttembed.core.backends import create as build

        got: StateRegistry = build("registry", str(spec).strip(), create=create, index=index,
                                   cache=cache, offline_ok=offline_ok)
        return got
    from tttembed.registry.versions import Registry

    return Registry(spec, create=create, index=index)


__all__ = ["open_registry"]
