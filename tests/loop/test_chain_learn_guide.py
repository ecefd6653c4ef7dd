"""The chain guide's "Learning from traffic" block runs as written (bash, the venv's
`tttembed` and `python`) from a fresh folder: on the tiny multi-hop set (with its judge's
labels) written where the block's `D` points, no checkpoint trained before (`states add
reg/chain base` starts from the untrained encoder); only the ports change. The stand-in judge and the server start in the background, as the
guide says to run them in terminals of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.chain.conftest import _one_torch_thread  # noqa: F401  (fixture)
from tests.loop.chain_traffic import write_judged_dataset
from tests.serve.conftest import free_socket
from tests.test_readme import _block

BACKGROUND = ("tttembed serve", "python examples/rerank_server.py")


def _port() -> int:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    return int(port)


def _wait(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"{proc.args} did not start"
        time.sleep(0.3)


def test_the_guides_learning_commands_run_as_written(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    write_judged_dataset(tmp_path / "data" / "2wikimultihopqa")
    os.symlink(Path(__file__).resolve().parents[2] / "examples", tmp_path / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "TTTEMBED_THREADS": "1"}
    lines = [ln.strip() for ln in _block("chain-learn").splitlines() if ln.strip()]
    sets = " ; ".join(ln for ln in lines if ln.startswith("D="))
    ports = {"8000": str(_port()), "8001": str(_port())}
    started: list[subprocess.Popen] = []
    outputs: list[str] = []
    try:
        for line in lines:
            if line.startswith("D="):
                continue
            for old, new in ports.items():
                line = line.replace(old, new)
            if line.startswith(BACKGROUND):
                proc = subprocess.Popen(["bash", "-c", f"{sets} ; exec {line}"], cwd=tmp_path,
                                        env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
                started.append(proc)
                port = ports["8000"] if line.startswith("tttembed serve") else ports["8001"]
                _wait(f"http://127.0.0.1:{port}/healthz", proc)
                continue
            done = subprocess.run(["bash", "-c", f"{sets} ; {line}"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
            outputs.append(done.stdout + done.stderr)
    finally:
        for proc in started:
            proc.terminate()
            proc.wait(30)
    learned, listed = outputs[-2], outputs[-1]
    assert "chain cycle:" in learned, learned
    # the candidate the cycle registered, with its reason (or why there was none)
    assert "v1" in listed or "no chain question judged relevant" in learned, listed
