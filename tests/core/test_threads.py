"""The thread policy: the number given, else TTTEMBED_THREADS, else the CPUs nobody else
keeps busy (measured from /proc/stat between calls, this process's own time left out)."""

from __future__ import annotations

import json
import os

import pytest

from tttembed.core import devices
from tttembed.core.errors import ConfigError


def test_explicit_then_environment_then_measured(monkeypatch):
    monkeypatch.setenv(devices.THREADS_ENV, "3")
    with monkeypatch.context() as m:  # a 4-CPU process
        m.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
        assert devices.thread_count(2) == 2 and devices.thread_count() == 3
        # more than the process may use: capped at its CPUs, with a warning
        with pytest.warns(RuntimeWarning, match="more than the 4 CPUs"):
            assert devices.thread_count(99999) == 4
        m.setenv(devices.THREADS_ENV, "99999")
        with pytest.warns(RuntimeWarning, match="99999 is more than the 4 CPUs"):
            assert devices.thread_count() == 4
    monkeypatch.setenv(devices.THREADS_ENV, "many")
    with pytest.raises(ConfigError, match="TTTEMBED_THREADS='many'"):
        devices.thread_count()
    monkeypatch.delenv(devices.THREADS_ENV)
    n = devices.thread_count()
    assert 1 <= n <= len(devices.os.sched_getaffinity(0))


def _fake(monkeypatch, readings):
    """``readings``: successive (wall s, idle ticks, total ticks, own cpu s)."""
    it = iter(readings)
    monkeypatch.setattr(devices._FreeCpus, "_read", lambda self, cpus: next(it))
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(devices.time, "sleep", lambda s: None)
    return devices._FreeCpus(background=False)


def test_free_cpus_leave_out_what_others_keep_busy(monkeypatch):
    # 4 CPUs over 1 s: 400 ticks, 100 idle -> 3 CPUs busy, 1 of them ours -> 2 free
    free = _fake(monkeypatch, [(0.0, 0, 0, 0.0), (1.0, 100, 400, 1.0)])
    assert free() == 2
    # idle machine, the process itself on two CPUs: every CPU is free
    free = _fake(monkeypatch, [(0.0, 0, 0, 0.0), (1.0, 200, 400, 2.0)])
    assert free() == 4
    # everything taken by others: still one thread
    free = _fake(monkeypatch, [(0.0, 0, 0, 0.0), (1.0, 0, 400, 0.0)])
    assert free() == 1


def test_the_measure_is_kept_between_remeasurements(monkeypatch):
    readings = [(0.0, 0, 0, 0.0), (1.0, 400, 400, 0.0), (2.0, 400, 800, 0.0),
                (9.0, 400, 3600, 0.0)]
    free = _fake(monkeypatch, readings)
    clock = iter([1.2, 9.0])
    monkeypatch.setattr(devices.time, "monotonic", lambda: next(clock))
    assert free() == 4            # idle over the first second
    assert free() == 4            # 0.2 s later: not re-measured
    assert free() == 1            # 7 s of every CPU busy: re-measured


def test_a_daemon_thread_keeps_the_measure_current(monkeypatch):
    """After the first call the free CPUs are re-measured in the background: a process
    that idled while another one ran is not judged by that window (the call does not
    measure), and a core taken meanwhile is seen without any call."""
    import threading
    import time

    # every CPU idle at first, then all four busy with other processes' work
    readings = [(0.0, 0, 0, 0.0), (1.0, 400, 400, 0.0)]
    lock = threading.Lock()

    def read(self, cpus):
        with lock:
            if len(readings) > 2:
                return readings.pop(0)
            w = readings[-1][0] + 1.0
            readings.append((w, readings[-1][1], readings[-1][2] + 400, 0.0))
            return readings.pop(0)

    monkeypatch.setattr(devices._FreeCpus, "_read", read)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(devices, "REMEASURE_S", 0.01)
    monkeypatch.setattr(devices, "FIRST_SAMPLE_S", 0.0)
    free = devices._FreeCpus()
    try:
        assert free() == 4
        deadline = time.monotonic() + 10
        while free.value != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert free() == 1
    finally:
        free.forget()  # the sampler sees it is forgotten and stops


def test_use_threads_sets_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        assert devices.use_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_threads_option_is_the_root_option_wherever_it_is_written(monkeypatch):
    from typer.testing import CliRunner

    from tttembed.cli import app, hoist_threads

    assert hoist_threads(["learn", "D", "--threads", "2", "--quiet"]) == [
        "--threads", "2", "learn", "D", "--quiet"]
    assert hoist_threads(["search", "--threads=1"]) == ["--threads=1", "search"]
    monkeypatch.delenv(devices.THREADS_ENV, raising=False)
    try:
        r = CliRunner().invoke(app, ["compare", "--help", "--threads", "3"])
        assert r.exit_code == 0 and devices.os.environ.get(devices.THREADS_ENV) == "3"
    finally:
        devices.os.environ.pop(devices.THREADS_ENV, None)  # set by the command, not by us
    bad = CliRunner().invoke(app, ["--threads", "0", "compare", "--help"])
    assert bad.exit_code == 2 and devices.THREADS_ENV not in devices.os.environ


def test_applying_a_state_leaves_numpy_one_blas_thread_and_faiss_its_own():
    """OpenBLAS workers spin after a call and halve the FAISS search or model call next to
    them: applying a state sets numpy's own BLAS to one thread (in a fresh process, so
    nothing earlier decided it), and FAISS's thread pools keep theirs."""
    import subprocess
    import sys

    code = """
import json, os, numpy as np, faiss
from threadpoolctl import threadpool_info
from tttembed.adapt import AdaptState, apply_states
home = os.path.dirname(os.path.abspath(np.__file__))
def pools():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info()}
before = pools()
st = AdaptState("task", ("t",), np.full((1, 4), 0.1, np.float32), np.full(1, 0.5),
                np.ones(1, np.int64), identity="x", dim=4)
apply_states(np.eye(4, dtype=np.float32), {"task": ["t"] * 4}, [st])
print(json.dumps({"home": home, "before": before, "after": pools()}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    mine = [p for p in got["after"] if p.startswith(got["home"])]
    assert mine, got  # numpy's wheel carries its BLAS
    assert all(got["before"][p] == 2 for p in mine), got
    assert all(got["after"][p] == 1 for p in mine), got
    others = [p for p in got["after"] if not p.startswith(got["home"])]
    assert others and all(got["after"][p] == got["before"][p] for p in others), got


def test_a_faiss_search_runs_on_the_threads_the_rule_gives(monkeypatch):
    """FAISS's OpenMP threads follow :func:`devices.thread_count` (here the environment's
    count), set right before each search of a FAISS index."""
    import numpy as np

    faiss = pytest.importorskip("faiss")
    from tttembed.index.faiss_backend import FaissIndex

    before = faiss.omp_get_max_threads()
    flat = faiss.IndexFlatIP(4)
    flat.add(np.eye(4, dtype=np.float32))
    index = FaissIndex(path="mem", manifest={"dim": 4}, doc_ids=["a", "b", "c", "d"],
                       vectors=np.eye(4, dtype=np.float32), faiss_index=flat)
    try:
        for n in sorted({1, min(2, devices.usable_cpus())}):
            monkeypatch.setenv(devices.THREADS_ENV, str(n))
            faiss.omp_set_num_threads(3)
            _, rows = index.search(np.eye(4, dtype=np.float32)[:1], 2)
            assert rows[0][0] == 0 and faiss.omp_get_max_threads() == n
    finally:
        faiss.omp_set_num_threads(before)
