"""Retention at work: a background thread that prunes the store (and, in the learner, the
registry's versions) every :attr:`~tttembed.loop.retention.Retention.interval_s`
seconds, off the request path. Every serve replica with a store and the learner run
one; they may prune at once (:mod:`tttembed.loop.prune` says why that is safe). The
pruner has a store connection of its own, so no search or learning step waits on its
batches; a failing prune (the database restarting) is logged once per kind and tried
again at the next turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tttembed.core.errors import TTTEmbedError
from tttembed.loop.failures import OncePerKind
from tttembed.loop.retention import Retention
from tttembed.loop.rows import Store

log = logging.getLogger("tttembed.loop")


class Pruner:
    """Prunes the store ``open_store`` opens (a connection of its own) by
    ``retention``; with ``open_registry``, that registry's versions too
    (:mod:`tttembed.registry.retention`)."""

    def __init__(self, open_store: Callable[[], Store], retention: Retention, *,
                 open_registry: Callable[[], Any] | None = None,
                 name: str = "pruner") -> None:
        self.open_store, self.retention = open_store, retention
        self.open_registry = open_registry
        self.registry: Any = None
        self.name = name
        self.stop = threading.Event()
        self._store: Store | None = None
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.rows: dict[str, int] = {}
        self.versions_dropped = 0
        self.last: dict[str, Any] = {}
        self.error = ""

    def run_once(self, now: float | None = None) -> dict[str, Any]:
        """One prune of the store and (given) the registry: what it did."""
        now = time.time() if now is None else now
        if self._store is None:
            self._store = self.open_store()
        out: dict[str, Any] = {"at": now}
        if self.retention.enabled:
            report = self._store.prune(now - self.retention.retain_s,
                                       batch=self.retention.batch)
            out["store"] = report.to_dict()
            for table, n in report.rows.items():
                self.rows[table] = self.rows.get(table, 0) + n
        if self.open_registry is not None and self.retention.enabled:
            from tttembed.registry.retention import KeepRule, prune_versions

            if self.registry is None:
                self.registry = self.open_registry()
            rule = KeepRule(self.retention.keep_versions, self.retention.retain_s)
            versions = prune_versions(self.registry, rule, now=now)
            out["versions"] = {"dropped": list(versions.dropped),
                               "kept": versions.versions_after,
                               "bytes_freed": versions.bytes_freed}
            self.versions_dropped += len(versions.dropped)
        self.runs += 1
        self.last = out
        return out

    def status(self) -> dict[str, Any]:
        """What ``/v1/loop`` shows: the settings, the prunes so far, the last one."""
        return {**self.retention.to_dict(), "prunes": self.runs,
                "pruned_rows": dict(self.rows), "versions_dropped": self.versions_dropped,
                "last": self.last, "error": self.error}

    def start(self) -> Pruner:
        if self.retention.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        said = OncePerKind(f"{self.name}: prune failed")
        while not self.stop.wait(self.retention.interval_s):
            try:
                self.run_once()
                self.error = ""
                said.ok()
            except (TTTEmbedError, OSError) as exc:
                self.error = " ".join(f"{type(exc).__name__}: {exc}".split())
                said.failed(exc)
            except Exception as exc:  # noqa: BLE001 - a pruner never takes a server down
                self.error = " ".join(f"{type(exc).__name__}: {exc}".split())
                log.exception("%s: prune failed", self.name)

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._store is not None:
            self._store.close()
            self._store = None
        if self.registry is not None:
            self.registry.close()
            self.registry = None


__all__ = ["Pruner"]
