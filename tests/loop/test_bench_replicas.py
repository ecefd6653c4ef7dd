"""A tiny run of ``benchmarks/bench_loop.py --replicas 3`` (three ``tttembed serve``
replicas on a PostgreSQL registry, one learner, promotions and a database restart under
traffic) on a made-up corpus of 40 documents: the script runs to its end and prints its
three claims. Timings are not asserted (a smoke test on a shared machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loop.test_replicas import _env

pytest.importorskip("uvicorn")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ("claim: loop replicas: promotion visible on every replica after the commit",
          "claim: loop replicas: failed /v1/search + /v1/embeddings requests across a "
          "PostgreSQL restart",
          "claim: loop replicas: /v1/search p99 during a promotion / idle")


def _tiny_beir(folder: Path) -> Path:
    topics = ["json files", "regular expressions", "file paths", "sorting lists",
              "reading csv", "dates and times", "network sockets", "unit tests"]
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(40):
            t = topics[i % len(topics)]
            f.write(json.dumps({"_id": f"d{i}", "title": f"On {t} ({i})",
                                "text": f"How to work with {t} in Python, part {i}."}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(topics * 2):
            f.write(json.dumps({"_id": f"q{i}", "text": f"how do I handle {t}? ({i})"}) + "\n")
    return folder


def test_bench_loop_replicas_runs_and_prints_its_claims(tmp_path):
    from tests.pg import postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb): apt-get install -y postgresql")
    data = _tiny_beir(tmp_path / "tiny")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_loop.py"), "--replicas", "3",
           "--data", str(data), "--docs", "40", "--promotions", "2", "--gap-s", "0.5",
           "--down-s", "1", "--clients", "1", "--judge-budget", "20",
           "--work", str(tmp_path / "work")]
    r = subprocess.run(cmd, cwd=ROOT, env={**_env(tmp_path), "OMP_NUM_THREADS": "1"},
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    if r.returncode == 0 and r.stdout.startswith("skipped:"):
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, out[-4000:]
    for claim in CLAIMS:
        assert [ln for ln in r.stdout.splitlines() if ln.startswith(claim)], (claim,
                                                                             out[-4000:])
    assert "promotion  2 -> " in r.stdout and "PostgreSQL stopped" in r.stdout, r.stdout
