"""``serve --learn``'s learner stops with its server, however the server ends (issue 59:
after SIGTERM or SIGKILL of the server its learner was still alive a second later): real
processes, ``kill -9`` and SIGTERM; a clean stop says so."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.loop.test_loop import Judgments, world  # noqa: F401  (fixture)
from tests.loop.test_replicas import _env, _get, _learner_args, _port, _proc_state, _process, _wait
from tests.servers import LocalOpenAIServer

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.process  # real `tttembed serve --learn` processes


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and _proc_state(pid) not in ("Z", "X")


def _learners(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in children.read_text().split()] if children.exists() else []


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_the_learner_ends_with_its_server(world, tmp_path, how):  # noqa: F811
    reg, port = tmp_path / "reg", _port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with LocalOpenAIServer(rerank=Judgments(world["relevant"])) as rerank, \
            _process(["serve", "--index", str(world["root"] / "index"), "--port", str(port),
                      "--registry", str(reg), "--learn",
                      *_learner_args(world, reg, f"rerank:t@{rerank.url}")],
                     _env(tmp_path), log) as proc:
        _wait("the server", lambda: _get(f"{url}/healthz"), [proc], [log])
        _wait("the learner", lambda: _learners(proc.pid), [proc], [log])
        (learner,) = _learners(proc.pid)
        _wait("the learner's first status", lambda: (reg / "loop.json").exists(),
              [proc], [log], limit=120)
        os.kill(proc.pid, how)
        proc.wait(60)
        gone = time.monotonic()
        while _alive(learner) and time.monotonic() - gone < 1.0:
            time.sleep(0.02)
        assert not _alive(learner), (f"the learner {learner} outlived its server by 1 s "
                                     f"({signal.Signals(how).name})\n{log.read_text()[-2000:]}")
        after = {p: p.stat().st_mtime_ns for p in reg.rglob("*") if p.is_file()}
        time.sleep(1.0)
        assert {p: p.stat().st_mtime_ns for p in reg.rglob("*") if p.is_file()} == after
    if how == signal.SIGTERM:  # a clean stop says so
        assert f"learner (pid {learner}) stopped with its server" in log.read_text(), \
            log.read_text()[-2000:]
