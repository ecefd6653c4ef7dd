# ruff: noqa: F811  (the fixtures imported from the chain tests)
"""The chain guide's "Serving" block runs as written (bash, the venv's `tttembed`, curl):
on the tiny multi-hop set written where the block's `D` points, with the chain tests'
gold checkpoint as `ckpt/gold`; only the port and the ids the first answer gives change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
    write_dataset,
)
from tests.serve.conftest import free_socket
from tests.test_readme import _block


def _bash(line: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def test_the_guides_serving_commands_run_as_written(gold_checkpoint, tmp_path):
    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("curl or bash is not installed")
    ckpt, _ = gold_checkpoint
    write_dataset(tmp_path / "data" / "2wikimultihopqa")
    shutil.copytree(ckpt, tmp_path / "ckpt" / "gold")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "TTTEMBED_THREADS": "1"}
    lines = [ln.strip() for ln in _block("chain-serve").splitlines() if ln.strip()]
    sets = " ; ".join(ln for ln in lines if ln.startswith("D="))
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    server = None
    answers: list[dict] = []
    try:
        for line in lines:
            if line.startswith("D="):
                continue
            line = line.replace("8000", str(port))
            if line.startswith("tttembed serve"):
                server = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=tmp_path,
                                          env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
                _wait(port, server)
                continue
            if answers:
                found = answers[0]
                line = line.replace("SEARCH_ID", found["search_id"]).replace(
                    "DOC_ID", found["data"][0]["id"])
            out = _bash(f"{sets} ; {line}", tmp_path, env)
            if line.startswith("curl"):
                answers.append(json.loads(out))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    chain, events = answers
    assert chain["version"] == "v1" and chain["encoder"] == "reg/chain"
    assert len(chain["data"]) == 5 and len(chain["hops"]) == 2
    assert events["stored"] == 1


def _wait(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise AssertionError(f"the guide's server exited: {server.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, "the guide's server did not start"
        time.sleep(0.3)
