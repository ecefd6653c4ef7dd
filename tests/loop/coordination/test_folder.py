"""The loop's coordination as files in a folder registry: the learner's record and
heartbeat, the one-learner lock, the replicas' reports and the candidate, beside the
versions (which it never touches)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from tttembed.loop.coordination import open_coordination
from tttembed.loop.coordination.folder import FolderCoordination, read_candidate
from tttembed.registry.versions import Registry


def test_the_learners_record_heartbeat_and_lock_are_files(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg", create=True)
    coord = open_coordination(reg)
    assert isinstance(coord, FolderCoordination) and coord.root == reg.root
    assert coord.read_status() == (None, "") and coord.heartbeat() is None
    coord.write_status({"cycles": 3})
    coord.beat({"pid": 12345, "host": "elsewhere", "time": time.time()})
    other = open_coordination(str(tmp_path / "reg"))  # by its folder, as a reader has it
    assert other.read_status() == ({"cycles": 3}, "")
    assert other.heartbeat()["pid"] == 12345
    (reg.root / "loop.json").write_text("{torn")
    got, why = other.read_status()
    assert got is None and "loop.json" in why
    code = ("import sys\nfrom tttembed.loop.coordination.folder import FolderCoordination\n"
            "with FolderCoordination(sys.argv[1]).learner_lock():\n    pass\n")
    with coord.learner_lock():  # a second learner is another process
        second = subprocess.run([sys.executable, "-c", code, str(reg.root)],
                                capture_output=True, text=True, timeout=120)
    assert second.returncode != 0
    assert re.search(r"ConfigError: another learner runs on registry .*pid 12345 on "
                     r"elsewhere", second.stderr), second.stderr[-2000:]
    with other.learner_lock():  # released with its holder
        pass
    assert reg.versions() == [] and reg.served() is None


def test_replicas_and_the_candidate_are_files(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg", create=True)
    coord = open_coordination(reg)
    coord.report_replica("host:1/x", {"version": "v1", "generation": 2})
    (rep,) = coord.replicas()
    assert rep["replica"] == "host:1/x" and rep["generation"] == 2
    assert coord.replicas(fresh_s=-1.0) == []  # stale reports are not listed
    assert json.loads((reg.root / "replicas" / "host_1_x.json").read_text())["version"] == "v1"
    served, empty = reg.mark(), coord.candidate_mark()
    assert coord.candidate() is None and empty == (0, 0)
    record = coord.set_candidate("v2", None)
    assert coord.candidate() == record == read_candidate(reg.root)
    assert reg.mark() == served and coord.candidate_mark() != empty
    coord.clear_candidate()
    assert coord.candidate() is None and coord.candidate_mark() == empty
