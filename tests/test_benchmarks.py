"""The benchmarks still run against the library they measure (a tiny size: this checks
that they run and report their claims, not what they measure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_the_optimizer_benchmark_runs_every_scope_and_reports_its_claims(tmp_path):
    claims = tmp_path / "claims.jsonl"
    r = subprocess.run([sys.executable, str(BENCH / "bench_optimizer.py"), "--n", "60",
                        "--steps", "3", "--loop-sample", "2", "--tasks", "3"],
                       capture_output=True, text=True, timeout=300, cwd=BENCH.parent,
                       env={**os.environ, "TTTEMBED_CLAIMS": str(claims)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for scope in ("global", "task", "query"):
        assert any(line.startswith(scope) for line in r.stdout.splitlines()), r.stdout
    assert len(claims.read_text().splitlines()) >= 3
