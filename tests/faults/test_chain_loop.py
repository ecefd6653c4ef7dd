# ruff: noqa: F811  (the fixtures imported from the chain tests)
"""The chain learner (``tttembed loop --chain``) under SIGKILL: killed while it pays the
judge, and killed mid-cycle while it writes the version it learned, then started again.
Real processes, the stand-in judge on 127.0.0.1, the chain learner's tiny traffic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.faults.conftest import ROOT, env
from tests.loop.chain_traffic import answered, judge_server
from tests.loop.test_chain_learn import fresh, traffic  # noqa: F401  (fixtures)

pytest.importorskip("sentence_transformers")

BUDGET = 150
#: Pairs one judge request holds at most (--judge-depth): the request in flight at a kill.
DEPTH = 10


def _learner(setup: dict[str, Any], work: Path, url: str, cache: Path, log: Path,
             fault: str | None = None) -> subprocess.Popen:
    args = ["loop", "--registry", str(work / "states"), "--index", str(setup["index"]),
            "--judge", f"rerank:tiny@{url}", "--corpus", str(setup["data"]),
            "--chain", str(work / "chain"), "--once", "--judge-budget", str(BUDGET),
            "--judge-rpm", "60000", "--learn-every", "10000", "--min-queries", "2",
            "--drift-sample", "20", "--judge-depth", str(DEPTH)]
    with open(log, "w", encoding="utf-8") as err:
        return subprocess.Popen([sys.executable, "-m", "tttembed", *args], cwd=ROOT,
                                env=env(fault, TTTEMBED_CACHE_DIR=str(cache)),
                                stdout=subprocess.DEVNULL, stderr=err)


def _wait(proc: subprocess.Popen, log: Path, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the chain learner did not finish: {log.read_text()[-2000:]}"
                             ) from None


def _versions(chain: Path) -> list[str]:
    from tttembed.registry.open import open_registry

    reg = open_registry(str(chain))
    try:
        survey = reg.survey()
        assert not survey.problems, survey.problems
        return [v.name for v in survey.versions]
    finally:
        reg.close()


def test_a_killed_chain_learner_pays_nothing_twice_and_keeps_its_registry_whole(
        traffic, fresh, tmp_path):
    """SIGKILL while the chain learner pays a slow judge, and again mid-cycle as it writes
    the version it learned: after a restart that completes a cycle, no pair is in the
    store twice, the store's spend equals the ledger's pairs plus the drift re-scores,
    the budget holds, no half-written version is seen and the served version loads."""
    from tttembed.chain.checkpoint import load_encoder
    from tttembed.index.store import load_index
    from tttembed.loop.chain.promote import served_checkpoint
    from tttembed.loop.open import open_store
    from tttembed.loop.status import read_status
    from tttembed.registry.open import open_registry
    from tttembed.score.ledger import Ledger

    reg = open_registry(str(fresh / "chain"))
    reg.promote("v1", by="user")  # a served version that must keep loading
    reg.close()
    cache, count = tmp_path / "cache", tmp_path / "pairs.txt"
    with judge_server(traffic["data"], count, latency=0.3) as (url, _):
        proc = _learner(traffic, fresh, url, cache, tmp_path / "a.log")
        deadline = time.monotonic() + 360
        while answered(count) < 2 * DEPTH:  # two requests answered: it is paying
            assert proc.poll() is None, (tmp_path / "a.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the chain learner paid nothing"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        time.sleep(1.0)  # a request in flight at the kill reaches the judge, unanswered
        paying = answered(count)
        # killed mid-cycle, as it writes the learned version's folder
        proc = _learner(traffic, fresh, url, cache, tmp_path / "b.log", fault="swap:written@v2")
        assert _wait(proc, tmp_path / "b.log") == -signal.SIGKILL, \
            (tmp_path / "b.log").read_text()[-2000:]
        assert answered(count) > paying
        assert _versions(fresh / "chain") == ["v1"]  # no half-written v2
        proc = _learner(traffic, fresh, url, cache, tmp_path / "c.log")
        assert _wait(proc, tmp_path / "c.log") == 0, (tmp_path / "c.log").read_text()[-2000:]
    assert _versions(fresh / "chain") == ["v1", "v2"]  # the restart completed a cycle
    status = read_status(fresh / "chain")
    assert status is not None and status.last_cycle["version"] == "v2"
    store = open_store(None, str(fresh / "states"))
    try:
        rows = store.rewards(trusted_only=False)
        spend = store.spent()
    finally:
        store.close()
    keys = Counter((r.task, r.query, r.doc_id) for r in rows)
    assert rows and max(keys.values()) == 1          # no pair in the store twice
    ledger = Ledger(cache / "ledger.sqlite").count()
    assert ledger == len(rows)                       # every answer kept, once
    audits = spend.get("drift", 0) + spend.get("audit", 0)
    assert audits > 0 and sum(spend.values()) == ledger + audits  # no pair paid twice
    assert sum(spend.values()) <= BUDGET
    assert answered(count) <= sum(spend.values()) + DEPTH  # but the request in flight
    reg = open_registry(str(fresh / "chain"))
    try:
        name, path = served_checkpoint(reg)
        assert name is not None and path is not None
        encoder = load_encoder(path, max_seq_length=256, index=load_index(traffic["index"]))
        assert encoder.encode(["a question"]).shape[0] == 1
    finally:
        reg.close()
