"""One entry to the feedback store: a ``postgresql://`` URL, ``sqlite:PATH``, a path, or
the registry's own store."""

from __future__ import annotations

from pathlib import Path

from tttembed.core.errors import ConfigError
from tttembed.loop.rows import Store
from tttembed.loop.sqlite import SQLiteStore


def open_store(spec: str | None, registry: str | Path | None = None, *,
               lazy: bool = False) -> Store:
    """The one place a feedback store is chosen: the store ``spec`` names
    (``postgresql://...``, ``sqlite:PATH`` or a path) or, None, the registry's own
    (``registry``: its folder, ``loop.sqlite`` there; or its ``postgresql://`` URL, the
    same database, opened ``lazy``). ``lazy``: a PostgreSQL store that does not answer
    yet is opened anyway (a replica started while the database is down), each call
    trying again."""
    if spec is None:
        if registry is None:
            raise ConfigError("give --store (postgresql://... or a SQLite path) or --registry")
        from tttembed.registry.postgres import is_url

        if not is_url(registry):
            return SQLiteStore(Path(registry) / "loop.sqlite")
        scheme, _, rest = str(registry).strip().partition(":")
        if scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"give --store: a {scheme}: registry keeps no feedback store")
        spec, lazy = "postgresql:" + rest, True
    from tttembed.core.backends import create, split_spec

    scheme, _ = split_spec(spec)
    if "/" in scheme or "\\" in scheme or scheme == spec.strip() or len(scheme) == 1:
        return SQLiteStore(spec)  # a plain path (or a Windows drive letter)
    lazy_pg = lazy and scheme in ("postgresql", "postgres")
    store: Store = create("store", spec, **({"lazy": True} if lazy_pg else {}))
    return store


__all__ = ["open_store"]
