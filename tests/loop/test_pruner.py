"""The background pruner (issue 76): one turn prunes the store by the window and the
registry by its rule, its status says what it did, a failing turn is said and retried,
and the thread stops on close."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tttembed.adapt.state import AdaptState
from tttembed.core.errors import StoreUnavailable
from tttembed.loop.open import open_store
from tttembed.loop.pruner import Pruner
from tttembed.loop.retention import Retention
from tttembed.loop.rows import SearchLog
from tttembed.registry.versions import Registry


def _registry(root: Path, n: int) -> Registry:
    reg = Registry(root, create=True)
    for i in range(n):
        reg.register(AdaptState("task", ("t",), np.full((1, 4), i + 1.0, np.float32),
                                np.array([0.5]), np.array([10]), identity="st:x", dim=4,
                                corpus_fingerprint="f", scorer="s"))
    return reg


def test_one_turn_prunes_the_store_and_the_registry(tmp_path: Path) -> None:
    root = tmp_path / "reg"
    reg = _registry(root, 6)
    for name in ("v1", "v2", "v3", "v4"):
        reg.promote(name)
    store = open_store(None, root)
    now = time.time()
    store.log_searches([SearchLog(f"s{i}", "t", "q", now - 600 + i * 100, None, ("a",))
                        for i in range(6)])
    store.close()
    pruner = Pruner(lambda: open_store(None, root), Retention(retain_s=250.0,
                                                               keep_versions=2),
                    open_registry=lambda: Registry(root))
    try:
        # two besides the served v4: the newest (v6) and the rollback target (v3); the
        # young refused candidate v5 finds no room, nor do the older promoted v1 and v2
        did = pruner.run_once(now=now)
    finally:
        pruner.close()
    assert did["store"]["rows"]["searches"] == 4  # created at -600 .. -300 s: older
    assert sorted(did["versions"]["dropped"]) == ["v1", "v2", "v5"]
    status = pruner.status()
    assert status["retain"] == "250s" and status["prunes"] == 1
    assert status["pruned_rows"]["searches"] == 4 and status["versions_dropped"] == 3
    assert [v.name for v in Registry(root).versions()] == ["v3", "v4", "v6"]


def test_a_failing_turn_is_said_and_the_thread_stops(tmp_path: Path) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise StoreUnavailable("the store is down (test)")

    pruner = Pruner(broken, Retention(retain_s=60.0, every_s=0.05))  # type: ignore[arg-type]
    pruner.start()
    deadline = time.monotonic() + 10
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pruner.close()
    assert len(calls) >= 2 and "the store is down" in pruner.status()["error"]
    assert pruner._thread is not None and not pruner._thread.is_alive()


def test_forever_starts_no_thread(tmp_path: Path) -> None:
    pruner = Pruner(lambda: open_store(None, tmp_path), Retention.parse("forever")).start()
    assert pruner._thread is None
    pruner.close()
