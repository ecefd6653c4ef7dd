"""The closed loop keeps its promises (issue: the loop's promises): the judge budget is
never overspent (with or without an audit set, across restarts, with several learners on
one store), a server keeps following its registry through read errors and says when it
cannot, an audit that could not score says so, a version folder is write-once, ``states
diff`` sees a change in any dimension, and a forced learner stop exits non-zero with its
store closed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.faults.conftest import ROOT, env
from tests.faults.test_loop import _learner
from tests.loop.test_loop import QUERIES, TASK, Judgments, audit_folder, world  # noqa: F401
from tests.loop.test_replicas import _process, _wait
from tests.servers import LocalOpenAIServer

pytest.importorskip("sentence_transformers")


class Counting(Judgments):
    """The judgments, counting every pair the judge was asked to score."""

    def __init__(self, relevant: dict[str, str]) -> None:
        super().__init__(relevant)
        self.pairs = 0
        self._lock = threading.Lock()

    def __call__(self, query: str, documents: list[str]) -> list[float]:
        with self._lock:
            self.pairs += len(documents)
        return super().__call__(query, documents)


def _loop(world_: dict[str, Any], reg: Path, url: str, **kw: Any) -> Any:
    from tttembed.loop.config import LoopConfig
    from tttembed.loop.run import Loop

    return Loop(LoopConfig(registry=str(reg), index=str(world_["root"] / "index"),
                           judge=f"rerank:test@{url}", corpus=str(world_["corpus"]),
                           judge_rpm=60_000, **{"min_queries": 2, **kw}))


def _traffic(store: Any, world_: dict[str, Any], tag: str) -> None:
    from tttembed.loop.store import SearchLog

    now = time.time()
    store.log_searches([SearchLog(f"{tag}{i}", TASK, q, now, None, tuple(world_["raw"][q][:10]))
                        for i, q in enumerate(QUERIES)])


def _run(loop: Any, steps: int = 40, cycles: int = 3) -> None:
    for _ in range(steps):
        loop.step()
        if loop.state.idle:
            break
    for i in range(cycles):  # audits each cycle: the budget must hold there too
        loop.run_cycle(f"test-{i}")


@pytest.mark.parametrize("audit", [False, True], ids=["no-audit", "audit"])
def test_the_judge_budget_is_never_overspent(world, tmp_path, monkeypatch, audit):  # noqa: F811
    """A judge budget smaller than the traffic (and than the audit set): the pairs the judge
    is asked to score, and the loop's pairs_judged, never exceed --judge-budget, however
    many cycles audit; an audit with no budget left re-scores nothing."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    judge = Counting(world["relevant"])
    budget = 45
    kw: dict[str, Any] = {"audit": audit_folder(world, tmp_path / "audit")} if audit else {}
    with LocalOpenAIServer(rerank=judge) as server:
        loop = _loop(world, tmp_path / "reg", server.url, judge_budget=budget,
                     learn_every=10, drift_sample=20, **kw)
        _traffic(loop.store, world, "s")
        _run(loop)
        spent_at_end = judge.pairs
        loop.run_cycle("no budget left")
        assert judge.pairs == spent_at_end or judge.pairs <= budget
    status = json.loads((tmp_path / "reg" / "loop.json").read_text())
    assert judge.pairs <= budget, (judge.pairs, status["spend"])
    assert status["pairs_judged"] <= budget and loop.spent() <= budget
    assert status["pairs_judged"] >= judge.pairs  # the account misses nothing asked for
    assert status["judge_budget_left"] == budget - status["pairs_judged"]


def test_the_budget_holds_across_restarts_and_two_learners(world, tmp_path, monkeypatch):  # noqa: F811
    """A learner restarted on the same registry, and two learners on one store at once,
    together ask the judge for no more than --judge-budget pairs (the spend is reserved in
    the store before the judge is asked)."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    judge = Counting(world["relevant"])
    budget = 50
    reg = tmp_path / "reg"
    with LocalOpenAIServer(rerank=judge) as server:
        first = _loop(world, reg, server.url, judge_budget=budget, learn_every=1000,
                      drift_sample=20)
        _traffic(first.store, world, "s")
        first.step()  # pays up to 32 pairs
        first.close()
        # the restarted learner and a second one, both on the same store, racing
        monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache2"))  # no shared ledger
        loops = [_loop(world, reg, server.url, judge_budget=budget, learn_every=1000,
                       drift_sample=20) for _ in range(2)]
        _traffic(loops[0].store, world, "t")
        errors: list[BaseException] = []

        def work(loop: Any) -> None:
            try:
                _run(loop, steps=10, cycles=2)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(lp,)) for lp in loops]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
    assert not errors, errors
    assert judge.pairs <= budget, judge.pairs
    assert loops[0].spent() <= budget


def test_the_budget_account_is_one_transaction_on_postgresql(tmp_path):
    """Two processes reserving judge pairs on one PostgreSQL store at once never reserve
    more than the budget between them."""
    pytest.importorskip("psycopg")
    from tests.pg import postgres_server
    from tttembed.loop.open import open_store

    (tmp_path / "pg").mkdir()
    with postgres_server(tmp_path / "pg") as url:
        code = ("import sys; from tttembed.loop.open import open_store\n"
                "s = open_store(sys.argv[1]); n = 0\n"
                "for _ in range(200): n += s.reserve('judge', 3, 300)\n"
                "print(n)")
        procs = [subprocess.Popen([sys.executable, "-c", code, url], cwd=ROOT, env=env(),
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]
        got = [int((p.communicate(timeout=120)[0] or "0").strip() or 0) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        assert sum(got) == 300 and sum(open_store(url).spent().values()) == 300, got


def test_an_audit_that_could_not_score_says_so_and_freezes_nothing(world, tmp_path,  # noqa: F811
                                                                   monkeypatch):
    """Every re-score of the audit set fails: the audit records that it could not score
    (no AUC, passed None) and promotions are not frozen (no 'AUC 0.500')."""
    from tttembed.core.errors import TTTEmbedError

    class Broken:
        spec = "broken"

        def score(self, query: Any, items: Any) -> Any:
            raise TTTEmbedError("the judge is down")

    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path / "reg", server.url, judge_budget=1000,
                     learn_every=200, audit=audit_folder(world, tmp_path / "audit"))
        loop.auditor.scorer = Broken()  # the audit's judge (ledger and fresh) fails
        _traffic(loop.store, world, "s")
        _run(loop, cycles=0)
    last = loop.state.audits[-1]
    assert not loop.state.frozen, loop.state.reason
    assert last["auc"] is None and "could not score" in last["note"], last
    assert loop.registry.served() == "v1"


def test_one_auc_for_the_project():
    """The drift audit's AUC is the project's one rank-based AUC: NaN without both
    classes (never 0.5), linear memory."""
    import tttembed.loop.drift as drift
    from tttembed.metrics.quality import auc

    assert not hasattr(drift, "roc_auc")
    value, note = drift.people_auc(np.array([0.2, 0.9]), np.array([1, 1]))
    assert np.isnan(value) and "one class" in note
    check = drift.judge_audit(np.zeros(0), np.zeros(0), threshold=0.3, auc=value)
    assert check.passed and check.blank
    s, y = np.random.default_rng(0).random(200_001), np.arange(200_001) % 2 == 0
    assert abs(auc(s, y) - 0.5) < 0.01  # 10^10 pairs: a quadratic matrix would not fit


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_version_folder_is_write_once(world, tmp_path, monkeypatch):  # noqa: F811
    """Promote, roll back and thaw (a person's promotion while frozen): no file of any
    version folder changes; promoted/promoted_at come from the registry's history."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path / "reg", server.url, judge_budget=1000, learn_every=200)
        _traffic(loop.store, world, "s")
        _run(loop, cycles=0)
        reg = loop.registry
        assert reg.served() == "v1"
        v2 = reg.register(None, reason="raw, by hand").name
        versions = tmp_path / "reg" / "versions"
        before = _hashes(versions)
        reg.promote(v2, by="user", reason="by hand")
        reg.rollback()
        loop.state.frozen, loop.state.frozen_at = True, time.time() - 1
        reg.promote("v1", by="user", reason="thaw")
        loop.run_cycle("thaw")
        assert not loop.state.frozen
    after = _hashes(versions)
    assert {k: v for k, v in after.items() if k in before} == before
    v1 = reg.get("v1")
    assert v1.promoted and v1.promoted_by == "user" and v1.promoted_at
    assert "promoted" not in json.loads((versions / "v1" / "version.json").read_text())


def test_states_diff_sees_a_change_in_any_dimension(tmp_path):
    """Two versions that differ only in dimension 20 of one vector: the diff calls the key
    changed, with the norm of the difference and the cosine."""
    from tttembed.adapt.state import AdaptState
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "r", create=True)
    v = np.random.default_rng(0).normal(size=(2, 32)).astype(np.float32)
    w = v.copy()
    w[0, 20] += 0.5
    for vectors in (v, w):
        reg.register(AdaptState("task", ("a", "b"), vectors, np.full(2, 0.5),
                                np.ones(2, np.int64), identity="st:test", dim=32))
    d = reg.diff("v1", "v2")
    assert d["changed"] == ["a"] and d["unchanged"] == 1
    assert d["changes"]["a"]["delta_norm"] == pytest.approx(0.25, abs=1e-4)
    assert 0 < d["changes"]["a"]["cosine"] < 1


def test_a_forced_learner_stop_exits_non_zero_and_a_clean_one_closes_the_store(world,  # noqa: F811
                                                                              tmp_path):
    """SIGTERM while the judge hangs: past the grace the learner exits with a non-zero
    status (3) and says why; SIGTERM when idle: exit 0 with the store closed (SQLite's WAL
    checkpointed and removed)."""
    from tttembed.loop.open import open_store
    from tttembed.loop.process import FORCED_EXIT

    reg = tmp_path / "reg"
    reg.mkdir()
    store = open_store(None, reg)
    _traffic(store, world, "s")
    store.close()
    release = threading.Event()
    relevant = Judgments(world["relevant"])

    def hang(query: str, documents: list[str]) -> list[float]:
        release.wait(90)
        return relevant(query, documents)

    with LocalOpenAIServer(rerank=hang) as server:
        proc = _learner(world, reg, server.url, tmp_path / "cache")
        deadline = time.monotonic() + 120
        while not server.requests and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        took = time.monotonic() - t0
        release.set()
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert code == FORCED_EXIT, (code, err[-2000:])
    assert took < 30 and "did not finish" in err
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        proc = _learner(world, reg, server.url, tmp_path / "cache")
        status = reg / "loop.json"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            if status.exists() and json.loads(status.read_text()).get("idle"):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    wal = reg / "loop.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def _get(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, json.loads(r.read())


def test_a_server_keeps_following_its_registry_through_read_errors(world, tmp_path):  # noqa: F811
    """The registry folder is replaced by a file (an unmounted share; the watcher's stat
    fails with NotADirectoryError): /healthz and /v1/loop say following: false with the
    error (never a 500) while the old version is served; once the folder is back, a version
    promoted meanwhile is served and following is true again."""
    import socket

    from tttembed.adapt.state import AdaptState
    from tttembed.registry.versions import Registry, index_record

    index = world["index"]
    reg_dir = tmp_path / "reg"
    reg = Registry(reg_dir, create=True, index=index_record(index))
    dim = index.dim
    for seed in (1, 2):
        vec = np.random.default_rng(seed).normal(size=(1, dim)).astype(np.float32)
        reg.register(AdaptState("task", (TASK,), vec, np.full(1, 0.5), np.ones(1, np.int64),
                                identity=index.identity, dim=dim, corpus_fingerprint=str(
                                    index.manifest.get("corpus_fingerprint", ""))))
    reg.promote("v1", by="user")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with _process(["serve", "--index", str(world["root"] / "index"), "--port", str(port),
                   "--registry", str(reg_dir)], env(TTTEMBED_CACHE_DIR=str(tmp_path / "cache")),
                  log) as proc:
        def wait(what: str, check: Any) -> Any:
            return _wait(what, check, [proc], [log], limit=120)

        wait("the server", lambda: _get(f"{url}/healthz")[1]["following"])
        aside = tmp_path / "reg-aside"
        os.rename(reg_dir, aside)
        reg_dir.write_text("not a folder")
        health = wait("following: false", lambda: (lambda b: b if not b["following"] else None)(
            _get(f"{url}/healthz")[1]))
        assert health["status"] == "degraded" and health["version"] == "v1"
        assert "NotADirectory" in health["follow_error"] or "registry" in health["follow_error"]
        code, status = _get(f"{url}/v1/loop")
        assert code == 200 and status["following"] is False
        assert status["serving"]["version"] == "v1" and status["serving"]["error"]
        reg_dir.unlink()
        os.rename(aside, reg_dir)
        Registry(reg_dir).promote("v2", by="user")
        wait("v2 served", lambda: _get(f"{url}/healthz")[1]["version"] == "v2")
        code, status = _get(f"{url}/v1/loop")
        assert status["following"] is True and status["serving"]["version"] == "v2"
        assert status["version"] == "v2"
        assert log.read_text().count("cannot follow the registry") <= 2  # once per kind


def test_a_learner_step_reads_only_new_rows(world, tmp_path, monkeypatch):  # noqa: F811
    """Between cycles, a learner step never reads a whole table or counts one: the store's
    full readers fail, and the steps still judge every served pair."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as server:
        loop = _loop(world, tmp_path / "reg", server.url, judge_budget=1000,
                     learn_every=10_000, drift_sample=0)
        _traffic(loop.store, world, "s")

        def whole(*_: Any, **__: Any) -> Any:
            raise AssertionError("a step read a whole table")

        for name in ("searches", "feedback", "rewards", "counts"):
            monkeypatch.setattr(loop.store, name, whole)
        for _ in range(50):  # until every served pair is paid (the next step would learn)
            loop.step()
            loop.traffic.update()
            if not loop.traffic.queue.total:
                break
            time.sleep(0.02)
        assert loop.traffic.rewarded == 10 * len(QUERIES)
        assert loop.state.caches["queries"] == len(QUERIES)
