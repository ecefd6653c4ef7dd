"""One entry to the state registry: a folder path or a ``postgresql://`` URL."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.registry.base import StateRegistry, Version

log = logging.getLogger("tttembed.registry")


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


def open_for(spec: str | Path, path: str | Path) -> StateRegistry:
    """The registry ``spec`` for adding ``path``: a chain encoder checkpoint (a folder)
    goes in a chain registry, made for its index and base model when ``spec`` holds none
    yet; anything else in an existing state registry."""
    from tttembed.core.errors import DataError
    from tttembed.registry.chain import checkpoint_record, is_checkpoint, registry_record

    if not Path(path).exists():  # named before the registry (which may not exist yet)
        raise DataError("no such state file or chain checkpoint folder", path=path,
                        fix="give the vectors.npz `tttembed learn -o` wrote, or the "
                            "checkpoint folder `tttembed chain train` wrote")
    if not is_checkpoint(path):
        return open_registry(spec)
    try:
        return open_registry(spec)  # its own check (add_chain) says why an encoder misfits
    except DataError:  # no registry there yet
        return open_registry(spec, create=True,
                             index=registry_record(checkpoint_record(path)))


def open_for_base(spec: str | Path, index_spec: str | Path | None) -> StateRegistry:
    """A chain registry at ``spec`` made for the passage index ``index_spec``, serving
    the untrained encoder (``base``) until the learner promotes a version (``tttembed
    states add FOLDER base --index INDEX``); one that exists already is opened and
    checked against the index."""
    from tttembed.core.errors import ConfigError, DataError
    from tttembed.index.store import load_index
    from tttembed.registry.base import index_record
    from tttembed.registry.chain import KIND, is_chain

    if index_spec is None:
        raise ConfigError("`states add FOLDER base` makes a chain registry serving the "
                          "untrained encoder: give the passage index it serves with --index "
                          "(the one `tttembed chain search --index` built)")
    index = load_index(index_spec)
    if not str(index.manifest.get("embedder_spec", "")).startswith("st:"):
        raise ConfigError(f"--index {index_spec}: the chain needs an index built with a "
                          f"sentence-transformers model (st:), this one's is "
                          f"{index.identity!r}")
    try:
        reg = open_registry(spec)
    except DataError:  # none there yet
        return open_registry(spec, create=True, index={
            "kind": KIND, "identity": index.identity,
            "corpus_fingerprint": index.manifest.get("corpus_fingerprint") or "",
            "base": index.manifest["embedder_spec"]})
    if not is_chain(reg.manifest):
        raise ConfigError(f"{spec} holds learned states, not chain encoders: give `states "
                          "add` a new folder for the chain registry")
    reg.check_index(index_record(index))
    return reg


def cached_at_start(registry: Any, exc: Exception) -> Version | None:
    """What a server serves when, at its start, its database registry cannot be reached
    (``exc``): the version this machine's cache served last (None: raw, or the base
    encoder), as every replica follows (states and chain encoders alike); with nothing
    cached, a one-line ConfigError saying to start it when the database answers."""
    from tttembed.core.errors import ConfigError

    if not getattr(registry, "has_cached_served", lambda: False)():
        cache = getattr(registry, "cache", "")
        raise ConfigError(f"{' '.join(str(exc).split())}; and this replica has no cached "
                          f"served version in {cache} to serve meanwhile: start the "
                          "replica when the database answers") from None
    v: Version | None = registry.cached_served()
    log.warning("registry unreachable at start: serving the cached version %s",
                v.name if v is not None else "raw")
    return v


__all__ = ["cached_at_start", "open_for", "open_for_base", "open_registry"]
