"""``benchmarks/bench_clicks.py --server`` at a tiny size: real ``tttembed serve --learn``
processes over HTTP (the judge loop, then clicks only with ips and naive), the simulated
users' clicks posted to ``/v1/events`` and read by the learner, every goal reported as a
claim. This checks that the mode runs and reports, not what it measures (the demo corpus
is too small for the goals). The data is the demo task on six stdlib modules (texts cut
short), as ``tests/test_benchmarks.py`` uses; no shared data is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "bench_clicks.py"
MODULES = ("json", "csv", "re", "pathlib", "shutil", "functools")  # 141 docs, 14 queries
TIMEOUT_S = 400


@pytest.fixture(scope="module")
def demo_task(tmp_path_factory) -> Path:
    """The demo task as a BEIR folder, each text cut to its first 200 characters."""
    from tttembed.demo import export_demo

    folder = export_demo(tmp_path_factory.mktemp("clicks-server") / "tiny-demo",
                         modules=MODULES)
    corpus = folder / "corpus.jsonl"
    docs = [json.loads(line) for line in corpus.read_text().splitlines() if line]
    corpus.write_text("".join(json.dumps({**d, "text": d["text"][:200]}) + "\n"
                              for d in docs))
    return folder


def test_the_server_mode_runs_the_loop_over_http_and_reports_its_goals(tmp_path, demo_task):
    claims, out = tmp_path / "claims.jsonl", tmp_path / "server.json"
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "TTTEMBED_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TTTEMBED_THREADS": "1",
           "TTTEMBED_CLAIMS": str(claims),
           "PYTHONPATH": src + os.pathsep + path if path else src}
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--server", "--data-root", str(demo_task.parent),
         "--tasks", demo_task.name, "--searches", "160", "--windows", "2", "--etas", "1",
         "--learn-every", "20", "--min-queries", "2", "--judge-budget", "60",
         "--settle", "0.5", "--idle-timeout", "90", "--index-root", str(tmp_path / "idx"),
         "--json", str(out)], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT,
        env=env)
    log = r.stdout[-4000:] + r.stderr[-4000:]
    assert r.returncode == 0, log
    assert "skipped" not in r.stdout, log
    rows = [json.loads(line) for line in claims.read_text().splitlines()]
    assert len(rows) == 8, rows
    for row in rows:
        assert row["claim"].startswith("clicks (server): "), row
        assert f"claim: {row['claim']}:" in r.stdout, (row, log)
        assert "(tiny-demo, 160 searches, click settle 1 s)" in row["claim"], row
    task = json.loads(out.read_text())["tasks"][0]
    assert sorted(task["runs"]) == ["ips-eta1", "judge", "naive-eta1"], task["runs"].keys()
    for name, run in task["runs"].items():
        assert len(run["rows"]) == 2, name
        assert all(w["failed"] == 0 and w["searches"] == 80 for w in run["rows"]), name
        assert all(w["settled"] for w in run["rows"]), (name, run["rows"])
    judge = task["runs"]["judge"]
    assert judge["pairs_judged"] > 0 and task["judge_pairs_scored"] > 0, judge
    assert sum(w["clicks_posted"] for w in judge["rows"]) == 0  # the judge loop: no clicks
    for name in ("ips-eta1", "naive-eta1"):
        run = task["runs"][name]
        stored = sum(w["clicks_stored"] for w in run["rows"])
        assert stored > 0 and run["rows"][-1]["clicks_read"] == stored, run["rows"]
        assert run["pairs_judged"] == 0, run  # --judge none pays nothing
    assert set(task["ips_vs_naive"]) == {"1"}, task["ips_vs_naive"]
