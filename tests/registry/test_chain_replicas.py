"""Two ``tttembed serve --chain postgresql://...`` replicas (real processes) on one
PostgreSQL chain registry (a real server) follow a chain promotion as the state path's
replicas do: a promotion and a rollback reach both within their follow interval, each
answer names the version it served and equals ``tttembed chain search --encoder`` of that
version's checkpoint; a PostgreSQL restart mid-run and a promotion made right after it
reach both; a replica restarted while the database is down serves the version it cached
(``/healthz`` degraded) and follows again once it is back, and one with nothing cached
refuses to start in one line."""

# ruff: noqa: F811  (the fixtures imported from the chain and serve tests)
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    CHAINS,
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.loop.test_replicas import _env, _get, _port, _post, _process, _wait
from tests.pg import database_fixtures
from tests.serve.test_chain_routes import chain_setup, offline  # noqa: F401
from tttembed.cli import app as cli

pytest.importorskip("uvicorn")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")
pg_cluster, url = database_fixtures("cr_")
runner = CliRunner()


def states(*args: Any) -> Any:
    res = runner.invoke(cli, ["states", *map(str, args)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


def reweighted(src: Path, dest: Path, scale: float) -> Path:
    """A copy of checkpoint ``src`` whose LoRA B matrices are scaled by ``scale``: another
    encoder (other weights, other rankings) trained against the same index."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dest)
    path = dest / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(path))
    save_file({k: v * scale if "lora_B" in k else v for k, v in tensors.items()}, str(path),
              metadata={"format": "pt"})
    return dest


def _replica(stack: ExitStack, setup: dict[str, Any], reg: str, tmp: Path, name: str,
             env: dict[str, str]) -> tuple[str, Any, Path]:
    port = _port()
    log = tmp / f"{name}.log"
    proc = stack.enter_context(_process(
        ["serve", "--index", str(setup["index"]), "--port", str(port), "--chain", reg,
         "--registry-cache", str(tmp / f"cache-{name}")], env, log))
    return f"http://127.0.0.1:{port}", proc, log


def _answer(base: str, question: str) -> Any:
    status, body = _post(f"{base}/v1/chain/search", {"question": question, "top_k": 12})
    return body if status == 200 else ("failed", status, body)


def _version(base: str) -> Any:
    got = _answer(base, CHAINS[0][1])
    return got["version"] if isinstance(got, dict) else got


def _serves(base: str, version: str, want: dict[str, list[Any]]) -> None:
    """Every question's answer from ``base`` names ``version`` and equals ``want``."""
    for qid, question, _ in CHAINS:
        got = _answer(base, question)
        assert isinstance(got, dict) and got["version"] == version, (base, got)
        assert [(d["id"], d["score"]) for d in got["data"]] == want[qid], (base, qid)


@pytest.mark.slow  # ~80 s: three replica starts, a model each, on a small machine
def test_two_chain_replicas_follow_promotion_rollback_and_a_database_outage(
        url, pg_cluster, chain_setup, gold_checkpoint, tmp_path):
    ckpt, _ = gold_checkpoint
    other = reweighted(ckpt, tmp_path / "other", 4.0)
    want = {"v1": offline(chain_setup, tmp_path / "v1.jsonl", "--encoder", str(ckpt)),
            "v2": offline(chain_setup, tmp_path / "v2.jsonl", "--encoder", str(other))}
    assert want["v1"] != want["v2"]  # the two versions are told apart by their answers
    assert "as v1" in states("add", url, ckpt).output
    assert "as v2" in states("add", url, other).output
    states("promote", url, "v1")
    env = _env(tmp_path)
    with ExitStack() as stack:
        reps = [_replica(stack, chain_setup, url, tmp_path, n, env) for n in ("a", "b")]
        procs, logs = [r[1] for r in reps], [r[2] for r in reps]
        for base, _, _ in reps:
            _wait(base, lambda base=base: _get(f"{base}/healthz"), procs, logs)
            _serves(base, "v1", want["v1"])
        for step, name in (("promote", "v2"), ("rollback", "v1")):
            t0 = time.monotonic()
            states(step, url, *([name] if step == "promote" else []))
            for base, _, _ in reps:
                _wait(f"{base} serving {name}",
                      lambda base=base, name=name: _version(base) == name, procs, logs,
                      limit=10)
            assert time.monotonic() - t0 < 4.0  # NOTIFY: within the poll's reach
            for base, _, _ in reps:
                _serves(base, name, want[name])
        listed = states("list", url).stdout
        replicas = [ln for ln in listed.splitlines() if ln.startswith("replica ")]
        assert len(replicas) == 2 and all(ln.endswith("serves v1") for ln in replicas), listed

        pg_cluster.restart()  # mid-run: a promotion made right after reaches both
        states("promote", url, "v2")
        for base, _, _ in reps:
            _wait(f"{base} after the restart", lambda base=base: _version(base) == "v2",
                  procs, logs, limit=30)
            assert _get(f"{base}/healthz")["chain"]["error"] is None

        pg_cluster.stop()  # a replica restarted while the database is down ...
        procs[0].terminate()
        procs[0].wait(30)
        base, proc, log = _replica(stack, chain_setup, url, tmp_path, "a", env)
        _wait(f"{base} (database down)", lambda: _get(f"{base}/healthz"), [proc], [log])
        _serves(base, "v2", want["v2"])  # ... serves the version it cached
        health = _get(f"{base}/healthz")
        assert health["status"] == "degraded" and health["chain"]["error"], health
        out = subprocess.run([sys.executable, "-m", "tttembed", "serve", "--index",
                              str(chain_setup["index"]), "--port", str(_port()), "--chain",
                              url, "--registry-cache", str(tmp_path / "new")],
                             env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode != 0  # nothing cached: refused, in one line
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.startswith("error")]
        assert len(lines) == 1 and "no cached served version" in lines[0], out.stderr[-2000:]
        pg_cluster.start()
        states("promote", url, "v1")
        _wait(f"{base} following again", lambda: _version(base) == "v1", [proc], [log],
              limit=30)
        _serves(base, "v1", want["v1"])
        assert _get(f"{base}/healthz")["status"] == "ok"
