"""The closed loop under faults: the learner killed with SIGKILL while it pays the judge,
then started again; a registry whose served record is corrupt; garbage feedback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.faults.conftest import ROOT, env
from tests.loop.test_loop import QUERIES, TASK, Judgments, world  # noqa: F401  (fixture)
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")


def _log_traffic(reg, world_) -> None:  # noqa: ANN001
    from tttembed.loop.open import open_store
    from tttembed.loop.store import SearchLog

    store = open_store(None, reg)
    now = time.time()
    store.log_searches([SearchLog(f"s{i}", TASK, q, now, None, tuple(world_["raw"][q][:10]))
                        for i, q in enumerate(QUERIES)])
    store.close()


def _pairs(body: dict) -> list[tuple[str, str]]:
    return [(body["query"], d) for d in body["documents"]]


def _learner(world_, reg, url: str, cache) -> subprocess.Popen:  # noqa: ANN001
    return subprocess.Popen(
        [sys.executable, "-m", "tttembed", "loop", "--registry", str(reg), "--index",
         str(world_["root"] / "index"), "--judge", f"rerank:t@{url}", "--corpus",
         str(world_["corpus"]), "--judge-rpm", "60000", "--learn-every", "1000",
         "--judge-budget", "1000", "--drift-sample", "0"],
        cwd=ROOT, env=env(TTTEMBED_CACHE_DIR=str(cache)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)


def test_a_killed_learner_loses_no_paid_reward_and_pays_none_twice(world, tmp_path):  # noqa: F811
    """SIGKILL while the learner pays a slow judge: every pair the judge answered is in
    the ledger; after a restart every served pair is in the store once, and the judge is
    never asked again for an answered pair (only the request in flight at the kill)."""
    from tttembed.loop.open import open_store
    from tttembed.score.ledger import Ledger

    reg, cache = tmp_path / "reg", tmp_path / "cache"
    (reg).mkdir()
    _log_traffic(reg, world)
    judge = Judgments(world["relevant"])
    with LocalOpenAIServer(rerank=judge, latency=0.3) as server:
        proc = _learner(world, reg, server.url, cache)
        deadline = time.monotonic() + 120
        while server.count() < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        time.sleep(1.0)  # a request in flight at the kill reaches the server, unanswered
        n_before = len(server.requests)
        ledger = Ledger(cache / "ledger.sqlite")
        (spec,) = ledger.specs()
        committed = {p for r in server.requests if r.json
                     for p in _pairs(r.json) if ledger.get_many(spec, p[0], [p[1]])}
        proc = _learner(world, reg, server.url, cache)
        try:
            store = open_store(None, reg)
            deadline = time.monotonic() + 180
            while store.counts()["rewards"] < 10 * len(QUERIES):
                assert time.monotonic() < deadline, "the restarted learner did not finish"
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    later = [p for r in server.requests[n_before:] if r.json for p in _pairs(r.json)]
    assert len(committed) >= 2 and not committed & set(later)  # never asked again
    assert len(later) == len(set(later))  # nor anything twice after the restart
    counts = open_store(None, reg).counts()
    assert counts["rewards"] >= 10 * len(QUERIES)  # every served pair (and any validation)
    assert counts["paid"] <= counts["rewards"]
    assert Ledger(cache / "ledger.sqlite").count() == counts["rewards"]  # none lost


def test_a_corrupt_served_record_is_a_one_line_error_naming_the_file(tmp_path):
    """A registry whose served.json was cut short: `tttembed states list` fails with one
    line naming the file, and nothing is rewritten."""
    from tttembed.registry.versions import Registry

    Registry(tmp_path / "reg", create=True)
    served = tmp_path / "reg" / "served.json"
    served.write_text('{"served": "v1", "hist')
    out = subprocess.run([sys.executable, "-m", "tttembed", "states", "list",
                          str(tmp_path / "reg")], cwd=ROOT, env=env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(served) in lines[0], out.stderr
    assert served.read_text() == '{"served": "v1", "hist'
