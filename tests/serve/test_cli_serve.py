"""``tttembed serve`` as a process: starts, answers, reloads on SIGHUP (a broken file is
refused), logs one JSON line per request without the key, and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.serve.conftest import TASK, free_socket, state_copy


def _wait(check, what: str, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{what}: server gone or too slow\n{proc.communicate()[1]}")
        time.sleep(0.1)


def test_serve_command_reloads_on_sighup_and_stops_on_sigterm(setup, tmp_path):
    live = tmp_path / "live.npz"
    state_copy(setup, "task", live)
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "SERVE_TEST_KEY": "k3y-never-logged", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", "from tttembed.cli import main; main()", "serve",
           "--index", str(setup["root"] / "index"), "--state", str(live),
           "--port", str(port), "--api-key-env", "SERVE_TEST_KEY"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer k3y-never-logged"}

    def generation() -> int:
        return int(httpx.get(url + "/v1/states", headers=auth).json()["generation"])

    try:
        _wait(lambda: httpx.get(url + "/healthz").status_code == 200, "start", proc)
        r = httpx.post(url + f"/t/{TASK}/v1/embeddings", json={"input": "x"}, headers=auth,
                       timeout=60)
        assert r.status_code == 200 and r.headers["x-tttembed-states"] == "live.npz=1"
        state_copy(setup, "other", live)
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: generation() == 2, "SIGHUP reload", proc)
        live.write_bytes(b"garbage")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: httpx.get(url + "/v1/states", headers=auth).json()["last_reload"]["ok"]
              is False, "refused reload", proc)
        assert generation() == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    # uvicorn shuts down gracefully, then re-raises the signal (the shell sees 143)
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Application shutdown complete" in err and "tttembed.serve INFO stopped" in err
    assert "k3y-never-logged" not in err
    access = [json.loads(line.split("INFO ", 1)[1]) for line in err.splitlines()
              if "tttembed.serve.access" in line]
    assert any(a["route"] == "task_embeddings" and a["status"] == 200 for a in access)
    assert "reload refused" in err


def test_importing_the_api_loads_no_web_stack():
    code = ("import sys, tttembed.api; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('starlette', 'uvicorn', 'torch')]; print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_serve_help_lists_every_option():
    from typer.testing import CliRunner

    from tttembed.cli import app

    r = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert r.exit_code == 0
    for opt in ("--index", "--state", "--query-source", "--host", "--port", "--workers",
                "--api-key-env"):
        assert opt in r.output


@pytest.mark.parametrize("bad", ["missing.npz"])
def test_serve_refuses_a_bad_state_file_at_start(setup, tmp_path, bad):
    from typer.testing import CliRunner

    from tttembed.cli import app

    r = CliRunner().invoke(app, ["serve", "--index", str(setup["root"] / "index"),
                                 "--state", str(tmp_path / bad), "--port", "1"])
    assert r.exit_code == 1
    assert "state file not found" in r.output
