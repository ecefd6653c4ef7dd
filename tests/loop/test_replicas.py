"""The closed loop as users run it, in real processes: ``tttembed serve --learn`` alone
(SQLite store in the registry), and two ``tttembed serve`` replicas beside one
``tttembed loop`` learner sharing a real PostgreSQL server. Traffic goes to both
replicas, feedback logged by one is accepted by the other, the learner promotes a version
that both replicas then serve, and a rollback typed at the CLI reaches both."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.loop.test_loop import QUERIES, TASK, Judgments, world  # noqa: F401  (fixture)
from tests.servers import LocalOpenAIServer

pytest.importorskip("uvicorn")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    return json.loads(urllib.request.urlopen(url, timeout=30).read())


def _post(url: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tttembed", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait(what: str, check: Any, procs: list[subprocess.Popen], logs: list[Path],
          limit: float = 180) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for p, log in zip(procs, logs):
            if p.poll() is not None:
                raise AssertionError(f"{log.name} exited {p.returncode}: "
                                     f"{log.read_text()[-3000:]}")
        try:
            got = check()
        except (OSError, ValueError):
            got = None
        if got:
            return got
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs)
    raise AssertionError(f"{what}: not within {limit:.0f} s\n{tails}")


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TTTEMBED_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH":
            os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                             os.environ.get("PYTHONPATH", "")])}


def _search(url: str, q: str) -> dict[str, Any]:
    status, body = _post(f"{url}/v1/search", {"query": q, "task": TASK, "k": 10})
    assert status == 200, body
    return body


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except OSError:
        return "Z"


def _learner_args(w: dict[str, Any], reg: Path, judge: str) -> list[str]:
    return ["--judge", judge, "--judge-budget", "500", "--judge-rpm", "60000",
            "--learn-every", "200", "--min-queries", "2", "--corpus", str(w["corpus"])]


def _traffic_then_promotion(urls: list[str], procs: list[subprocess.Popen],
                            logs: list[Path]) -> dict[str, Any]:
    first = {q: _search(urls[i % len(urls)], q) for i, q in enumerate(QUERIES)}
    assert all(b["version"] is None for b in first.values())
    status = _wait("a promoted version", lambda: (lambda s: s if s["version"] else None)(
        _get(f"{urls[-1]}/v1/loop")), procs, logs)
    for url in urls:
        _wait(f"{url} serving {status['version']}",
              lambda url=url: _search(url, QUERIES[0])["version"] == status["version"],
              procs, logs, limit=10)
    return {"first": first, "status": status}


def test_serve_learn_promotes_from_its_own_traffic(world, tmp_path):  # noqa: F811
    judge = Judgments(world["relevant"])
    reg, port = tmp_path / "reg", _port()
    url = f"http://127.0.0.1:{port}"
    logs = [tmp_path / "serve.log"]
    with LocalOpenAIServer(rerank=judge) as rerank, \
            _process(["serve", "--index", str(world["root"] / "index"), "--port", str(port),
                      "--registry", str(reg), "--learn",
                      *_learner_args(world, reg, f"rerank:t@{rerank.url}")],
                     _env(tmp_path), logs[0]) as proc:
        _wait("the server", lambda: _get(f"{url}/healthz"), [proc], logs)
        got = _traffic_then_promotion([url], [proc], logs)
        after = {q: _search(url, q) for q in QUERIES}
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        learner = [int(p) for p in children.read_text().split()] if children.exists() else []
        assert learner, "serve --learn runs no learner process"
    deadline = time.monotonic() + 30  # the learner ends with its server
    while any(Path(f"/proc/{p}").exists() and "Z" not in _proc_state(p) for p in learner):
        assert time.monotonic() < deadline, "the learner outlived its server"
        time.sleep(0.1)
    rel = world["relevant"]
    top = sum(after[q]["data"][0]["ids"][0] == rel[q] for q in QUERIES)
    assert top > sum(got["first"][q]["data"][0]["ids"][0] == rel[q] for q in QUERIES)
    assert got["status"]["versions"][-1]["promoted"]
    assert (reg / "loop.sqlite").exists() and (reg / "loop.json").exists()


@pytest.mark.parametrize("registry", ["folder", "postgresql"])
def test_two_replicas_and_one_learner_share_a_postgresql_store(world, tmp_path,  # noqa: F811
                                                               pg_url, registry):
    """The registry a shared folder (``--store`` the database) or the database itself
    (``--registry postgresql://...``, no --store: the store is the same database; each
    replica its own local cache)."""
    from tests.pg import new_database

    store = new_database(pg_url, f"replicas_{registry}")
    judge = Judgments(world["relevant"])
    reg: Any = tmp_path / "reg" if registry == "folder" else store
    shared = ["--store", store] if registry == "folder" else []
    ports = [_port(), _port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    logs = [tmp_path / "serve-a.log", tmp_path / "serve-b.log", tmp_path / "loop.log"]
    env = _env(tmp_path)
    index = str(world["root"] / "index")
    with LocalOpenAIServer(rerank=judge) as rerank, ExitStack() as stack:
        procs = [stack.enter_context(_process(
            ["serve", "--index", index, "--port", str(p), "--registry", str(reg), *shared,
             *([] if registry == "folder" else ["--registry-cache", str(tmp_path / f"c{p}")])],
            env, log)) for p, log in zip(ports, logs)]
        for url in urls:
            _wait(f"{url}", lambda url=url: _get(f"{url}/healthz"), procs, logs[:2])
        body = _search(urls[0], QUERIES[0])  # logged by replica A ...
        status, fb = _post(f"{urls[1]}/v1/feedback", {  # ... its feedback taken by B
            "search_id": body["data"][0]["search_id"], "doc_id": body["data"][0]["ids"][0],
            "label": 0.0})
        assert status == 202 and fb["stored"] == 1, fb
        procs.append(stack.enter_context(_process(
            ["loop", "--registry", str(reg), "--index", index, *shared,
             *_learner_args(world, reg, f"rerank:t@{rerank.url}")], env, logs[2])))
        got = _traffic_then_promotion(urls, procs, logs)
        assert got["status"]["feedback_received"] == 1
        assert got["status"]["searches"] >= len(QUERIES) + 1
        out = subprocess.run([sys.executable, "-m", "tttembed", "states", "rollback",
                              str(reg)], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        for url in urls:
            _wait(f"{url} rolled back", lambda url=url: _search(url, QUERIES[0])["version"]
                  is None, procs, logs, limit=10)
