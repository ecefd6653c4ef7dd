"""What every route shares: the index, the model, the engine, the state registry, the
metrics and the key, built once when the app starts."""

from __future__ import annotations

import hmac
import logging
import os
import signal
import socket
import threading
from typing import Any

from starlette.requests import Request

from tttembed.core.errors import StateMismatch, StoreUnavailable
from tttembed.embed.base import Embedder
from tttembed.serve.config import ServeConfig
from tttembed.serve.documents import Documents
from tttembed.serve.engine import Engine
from tttembed.serve.metrics import Metrics
from tttembed.serve.states import Follow, ServedStates
from tttembed.serve.traffic import TrafficLog, answered_recently

log = logging.getLogger("tttembed.serve")


class Service:
    """Everything the routes share, built once (model and index loaded eagerly)."""

    def __init__(self, config: ServeConfig, embedder: Embedder | None = None) -> None:
        from tttembed.index.embedder import embedder_for_index
        from tttembed.index.store import load_index

        self.config = config
        self.index = load_index(config.index)
        if embedder is None:
            embedder = embedder_for_index(self.index, cache=False, **self._upstream())
        elif embedder.identity != self.index.identity:
            raise StateMismatch(f"embedder {embedder.identity!r} is not the index's "
                                f"{self.index.identity!r}")
        self.model = str(self.index.manifest.get("embedder_spec", self.index.identity))
        self.engine = Engine(self.index, embedder, config.batching.cache_size,
                             config.batching.max_batch, config.batching.max_wait_ms)
        # load the model before the first request, on the thread that runs every call
        self.engine.encoder.batcher.encode(["warm-up"], "query")
        self.states = ServedStates(config, self.index)
        self.documents = Documents(self.index, config.corpus)
        self.documents.check()  # a --corpus of another fingerprint: refused at start
        self.metrics = Metrics()
        self.metrics.generation = self.states.current.generation
        self._key = config.api_key()
        self._key_bytes = self._key.encode() if self._key else None
        self.background: set[Any] = set()
        self.store = self._open_store()
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self._watching = threading.Event()
        self.follow = Follow()
        self._doc_ids: frozenset[str] | None = None
        self.traffic = TrafficLog(self.store) if self.store is not None else None
        self.pruner = self._start_pruner()
        self.chain = self._open_chain()
        if self.traffic is not None:
            self.traffic.probe()  # unreachable: said (/healthz degraded), tried again

    def _open_store(self) -> Any:
        if not self.config.loop.registry or self.states.versions is None:
            return None
        from tttembed.loop.open import open_store

        # lazy: a replica may start while the database is down
        return open_store(self.config.loop.store, self.config.loop.registry, lazy=True)

    def _start_pruner(self) -> Any:
        """The replica's background pruner (``--retain``; :mod:`tttembed.loop.pruner`),
        on a store connection of its own; None without a store."""
        if self.store is None:
            return None
        from tttembed.loop.open import open_store
        from tttembed.loop.pruner import Pruner

        loop = self.config.loop
        return Pruner(lambda: open_store(loop.store, loop.registry, lazy=True),
                      loop.retention, name="replica-pruner").start()

    def _upstream(self) -> dict[str, Any]:
        """The index's HTTP embedder's retry policy: ``--upstream-deadline`` bounds a
        search's wait (none for a local model)."""
        from tttembed.core.http import HTTP_SCHEMES, upstream_policy

        spec = str(self.index.manifest.get("embedder_spec", ""))
        if spec.partition(":")[0] not in HTTP_SCHEMES:
            return {}
        return {"retry": upstream_policy(self.config.upstream_deadline_s)}

    def _open_chain(self) -> Any:
        """``--chain``'s route parts (:mod:`tttembed.serve.chain_engine`), or None."""
        if not self.config.chain:
            return None
        from tttembed.serve.chain_engine import ChainService

        b = self.config.batching
        return ChainService(self.config.chain, self.index, self.engine, self.config.corpus,
                            b.max_batch, b.max_wait_ms, self.config.loop.registry_cache,
                            self.config.chain_max_seq_length, self.config.chain_state)

    def log_searches(self, rows: list[Any]) -> None:
        """Log served queries in the store (:class:`~tttembed.serve.traffic.TrafficLog`:
        held in memory and written by a timer while the store cannot be written)."""
        if self.traffic is not None:
            self.traffic.log(rows)

    def store_status(self) -> dict[str, Any]:
        """The traffic log's ``log_error``, ``unlogged`` and ``unlogged_dropped``."""
        return self.traffic.status() if self.traffic is not None else {
            "log_error": None, "unlogged": 0, "unlogged_dropped": 0}

    def find_search(self, search_id: str) -> Any:
        """The logged search ``search_id`` (a SearchLog), None when unknown. One this
        replica answered and still holds (the store could not be written) is written
        first; while it cannot be, StoreUnavailable says so (a 503: retry), never "not
        a search this loop logged"."""
        assert self.store is not None
        logged = self.store.get_search(search_id)
        if logged is None and self.traffic is not None and self.traffic.holds(search_id):
            self.traffic.flush()
            logged = self.store.get_search(search_id)
            if logged is None:
                raise StoreUnavailable(
                    f"search {search_id!r} was answered by this replica and is not written "
                    f"to the feedback store yet ({self.traffic.error or 'being written'}); "
                    "it is kept and written when the store answers")
        age = answered_recently(search_id) if logged is None else None
        if age is not None:  # another replica's, maybe held there: never a lost click
            raise StoreUnavailable(
                f"search {search_id!r} is not in the feedback store yet (answered {age:.0f} "
                "s ago; the replica that answered it may still be writing it)")
        return logged

    def close_traffic(self) -> None:
        """On shutdown: what the traffic log holds is written once more."""
        if self.traffic is not None:
            self.traffic.close()
        if self.pruner is not None:
            self.pruner.close()

    @property
    def doc_ids(self) -> frozenset[str]:
        if self._doc_ids is None:
            self._doc_ids = frozenset(self.index.doc_ids)
        return self._doc_ids

    def watch_registry(self) -> None:
        """Poll the registry's served version (a daemon thread) and swap it in when it
        changes: promotions and rollbacks reach this process within ``registry_poll_s``.
        The watcher survives every error: while the registry cannot be read, or the
        version it names cannot be served, ``self.follow`` says ``following: false``
        with the error (logged once per kind) and the watcher tries again each poll. A
        chain registry (``--chain``) has a watcher of its own."""
        if self.chain is not None:
            self.chain.source.watch(self.config.loop.registry_poll_s, self.replica)
        if self.states.versions is None or self._watching.is_set():
            return
        self._watching.set()
        threading.Thread(target=self._watch, name="tttembed-registry", daemon=True).start()

    def _watch(self) -> None:
        mark: Any = None
        try:
            mark = self.states.served_mark()
        except Exception as exc:  # noqa: BLE001  (the watcher must never end)
            self.follow.failed(exc)
        while self._watching.is_set():
            self.states.wait_change(self.config.loop.registry_poll_s)  # LISTEN, or a poll
            try:
                now = self.states.served_mark()
                if now != mark or not self.follow.following:
                    swapped, _, error = self.reload(roll_workers=False)
                    if error is not None:
                        raise StateMismatch(f"the registry's served version is refused: "
                                            f"{error}")
                mark = now
                self.follow.ok()
            except Exception as exc:  # noqa: BLE001  (the watcher must never end)
                self.follow.failed(exc)
            self.states.report(self.replica, self.follow.as_dict())

    def stop_watching(self) -> None:
        self._watching.clear()
        if self.chain is not None:
            self.chain.source.stop()

    def authorized(self, request: Request) -> bool:
        if self._key_bytes is None:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self._key_bytes)

    def reload(self, roll_workers: bool = True) -> tuple[bool, Any, str | None]:
        swapped, snap, error = self.states.reload()
        self.metrics.reload(swapped, snap.generation)
        if swapped and roll_workers and self.config.listen.workers > 1:
            os.kill(os.getppid(), signal.SIGHUP)  # uvicorn rolls every worker over
        return swapped, snap, error
