"""The closed-loop guide's ``retention`` block runs as written: ``store stats``, ``store
prune --dry-run``, ``states pin`` and ``store forget`` on a registry like the one the
guide's loop made (a version, searches of session s-42 among others)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.test_readme import ROOT, _block
from tttembed.adapt.state import AdaptState
from tttembed.loop.open import open_store
from tttembed.loop.rows import SearchLog
from tttembed.registry.versions import Registry


def _lines() -> list[str]:
    text = _block("retention").replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("tttembed ")]


def test_the_retention_block_runs_as_written(tmp_path: Path) -> None:
    root = tmp_path / "reg" / "stdlib-docs"
    reg = Registry(root, create=True)
    reg.register(AdaptState("task", ("stdlib-docs",), np.ones((1, 4), np.float32),
                            np.array([0.5]), np.array([10]), identity="st:x", dim=4,
                            corpus_fingerprint="f", scorer="s"))
    store = open_store(None, root)
    now = time.time()
    store.log_searches([SearchLog(f"s{i}", "stdlib-docs", f"question {i}", now - i, None,
                                  ("json.dumps",), session="s-42" if i < 2 else "")
                        for i in range(5)])
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    outs = []
    lines = _lines()
    assert [ln.split()[1:3] for ln in lines] == [["store", "stats"], ["store", "prune"],
                                                 ["states", "pin"], ["store", "forget"]]
    for line in lines:
        done = subprocess.run([sys.executable, "-m", "tttembed", *shlex.split(line)[1:]],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outs.append(done.stdout)
    assert "searches" in outs[0] and "registry" in outs[0] and "1 versions" in outs[0]
    assert "would delete 0 rows older than 7d" in outs[1], outs[1]
    assert "v1" in outs[2]
    assert "deleted the session's 2 searches" in outs[3], outs[3]
    assert Registry(root).pins() == ["v1"]
