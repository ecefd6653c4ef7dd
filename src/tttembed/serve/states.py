"""The served states: one immutable :class:`~tttembed.ttt.snapshot.Snapshot`, swapped whole
on reload.

A request reads ``registry.current`` once and uses that :class:`Snapshot` to the end, so
it sees the old states or the new ones, never a mix. :meth:`ServedStates.reload` builds
a complete new snapshot first (every state file read and checked against the index, the
query files re-read); only then is the reference replaced. A file that fails leaves the
current snapshot in place and the error is kept in ``last_reload``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from tttembed.adapt.state import load_state
from tttembed.core.errors import ConfigError, TTTEmbedError
from tttembed.index.base import Index
from tttembed.serve.config import ServeConfig
from tttembed.ttt.queries import query_sources
from tttembed.ttt.search import check_states
from tttembed.ttt.snapshot import Snapshot, now_iso

log = logging.getLogger("tttembed.serve")

def _text_map(config: ServeConfig) -> dict[str, dict[str, str]]:
    if not config.queries:
        return {}
    qs = query_sources(list(config.queries), task=list(config.tasks) or None,
                       split=config.split)
    out: dict[str, dict[str, str]] = {}
    for task, qid, text in zip(qs.tasks, qs.qids, qs.texts):
        out.setdefault(task, {}).setdefault(text, qid)
    return out


class Follow:
    """Whether this server follows its registry's served version: ``following`` false
    with the error while it cannot read the registry or serve the version it names
    (each kind of error logged once, and once more when following again)."""

    def __init__(self) -> None:
        self.following = True
        self.error: str | None = None
        self.since: str | None = None
        self._logged: set[str] = set()

    def failed(self, exc: BaseException) -> None:
        kind = type(exc).__name__
        message = " ".join(f"{kind}: {exc}".split())
        if kind not in self._logged:
            self._logged.add(kind)
            log.error("cannot follow the registry (still serving the version loaded "
                      "before; retrying every poll): %s", message)
        if self.following:
            self.since = now_iso()
        self.following, self.error = False, message

    def ok(self) -> None:
        if not self.following:
            log.info("following the registry again")
            self._logged.clear()
        self.following, self.error, self.since = True, None, None

    def as_dict(self) -> dict[str, Any]:
        return {"following": self.following, "error": self.error, "since": self.since}


class ServedStates:
    """Holds the current :class:`Snapshot`; ``reload()`` swaps it atomically."""

    def __init__(self, config: ServeConfig, index: Index) -> None:
        from tttembed.loop.coordination import open_coordination
        from tttembed.registry.base import index_record
        from tttembed.registry.open import open_registry

        self.config = config
        self.index = index
        self.versions = None if not config.loop.registry else open_registry(
            config.loop.registry, create=True, index=index_record(index),
            cache=config.loop.registry_cache, offline_ok=True)
        if self.versions is not None and self.versions.manifest.get("kind") == "chain":
            raise ConfigError(f"--registry {config.loop.registry} holds chain encoders, not "
                              "learned states: give it to --chain (and a state registry, "
                              "if any, to --registry)")
        #: the candidate and the replicas' reports, beside the registry
        self.coordination = None if self.versions is None else \
            open_coordination(self.versions)
        self._lock = threading.Lock()
        #: the registry's version this replica refused last (None: none refused)
        self.refused: dict[str, Any] | None = None
        self._wanted: str | None = None
        self._current = self._build(1)
        self.last_reload: dict[str, Any] = {"ok": True, "at": self._current.loaded_at,
                                            "generation": 1, "error": None}

    @property
    def current(self) -> Snapshot:
        return self._current

    def _paths(self, first: bool = False) -> tuple[Any, list[str]]:
        """The registry's served version and its state file, or the ``--state`` files.
        ``first``: at start a database registry that cannot be reached gives the version
        this replica's cache served last (none cached: a one-line error)."""
        from tttembed.registry.open import cached_at_start
        from tttembed.registry.postgres import RegistryUnavailable

        if self.versions is None:
            return None, list(self.config.states)
        try:
            name = self.versions.served()
            self._wanted = name
            v = None if name is None else self.versions.get(name)
        except RegistryUnavailable as exc:
            if not first:
                raise
            v = cached_at_start(self.versions, exc)
        return v, [str(v.state_path)] if v is not None and v.state_path.exists() else []

    def _build(self, generation: int) -> Snapshot:
        states, mtimes = [], []
        served, paths = self._paths(first=generation == 1)
        version = None if served is None or isinstance(served, str) else served.name
        for path in paths:
            mtime = os.stat(path).st_mtime if os.path.exists(path) else 0.0
            states.append(load_state(path))
            mtimes.append(mtime)
        check_states(states, self.index, allow_foreign=self.config.allow_foreign_state)
        qids = _text_map(self.config)
        if self.versions is not None:
            self.versions.remember_served(served)
        return Snapshot(generation, tuple(states), tuple(mtimes), qids, version=version,
                        candidate=self._candidate(generation, version, qids))

    def _candidate(self, generation: int, served: str | None,
                   qids: dict[str, dict[str, str]]) -> Snapshot | None:
        """The registry's candidate as a snapshot of its own, when interleaving (a
        candidate that cannot be loaded is not interleaved: logged, never fatal)."""
        if self.versions is None or self.coordination is None or not self.config.loop.interleave:
            return None
        record = self.coordination.candidate()
        if record is None or record["version"] == served:
            return None
        try:
            v = self.versions.get(str(record["version"]))
            states = [load_state(v.state_path)] if v.state_path.exists() else []
            check_states(states, self.index, allow_foreign=self.config.allow_foreign_state)
        except (TTTEmbedError, OSError, ValueError) as exc:
            log.error("not interleaving candidate %s: %s", record["version"], exc)
            return None
        return Snapshot(generation, tuple(states), (0.0,) * len(states), qids,
                        version=v.name)

    def served_mark(self) -> tuple[Any, ...] | None:
        """What changes when the registry's served version (or, interleaving, its
        candidate) does (None: no registry)."""
        if self.versions is None or self.coordination is None:
            return None
        mark = self.versions.mark()
        return mark + self.coordination.candidate_mark() if self.config.loop.interleave > 0 \
            else mark

    def wait_change(self, timeout: float) -> None:
        """Until the registry notifies a change, or ``timeout`` s."""
        if self.versions is None:
            time.sleep(timeout)
        else:
            self.versions.wait_change(timeout)

    def report(self, replica: str, follow: dict[str, Any]) -> None:
        """Tell the registry what this replica serves (``states list`` shows it); a
        registry that cannot be written is skipped quietly (the watcher reports it)."""
        if self.coordination is None:
            return
        cur = self._current
        try:
            self.coordination.report_replica(replica, {
                "version": cur.version, "generation": cur.generation,
                "following": follow.get("following"), "error": follow.get("error"),
                "refused": self.refused})
        except (OSError, TTTEmbedError):
            pass

    def reload(self) -> tuple[bool, Snapshot, str | None]:
        """Re-read every state and query file; swap only if all of them load.
        Returns (swapped, the snapshot now in force, the error if refused)."""
        with self._lock:
            t0 = time.perf_counter()
            try:
                new = self._build(self._current.generation + 1)
            except (TTTEmbedError, OSError, ValueError) as exc:
                error = str(exc)
                from tttembed.registry.postgres import RegistryUnavailable

                if self.versions is not None and not isinstance(exc, RegistryUnavailable) \
                        and self._wanted != self._current.version:
                    self.refused = {"version": self._wanted, "error": " ".join(error.split()),
                                    "at": now_iso()}
                self.last_reload = {"ok": False, "at": now_iso(), "error": error,
                                    "generation": self._current.generation}
                log.error("reload refused, keeping generation %d: %s",
                          self._current.generation, error)
                return False, self._current, error
            self._current = new
            self.refused = None
            self.last_reload = {"ok": True, "at": new.loaded_at, "error": None,
                                "generation": new.generation}
            log.info("reloaded %d state file(s): generation %d (%.0f ms)", len(new.states),
                     new.generation, 1000 * (time.perf_counter() - t0))
            return True, new, None
