"""The closed-loop guide's "Several machines" section run as written: the ``machines``
block's learner, two replicas (two "machines": each its own working folder, cache and
``--registry-cache``) and ``states`` commands against a real PostgreSQL server (tests/pg.py)
with the role of the section's URL, password authentication, and the block's own
``export PGPASSWORD=...``. Substituted, and nothing else: the URL's host and port (the
test's server), the ``--port`` numbers, and ``/var/cache/tttembed`` (a folder of each
"machine" under the test's tmp folder: two machines' local disks on one host).

Then what the section says around the block: a second learner exits at once with one
line naming the holder; a restart of the database under traffic fails no request and
a promotion made after it reaches both replicas; a replica started while the database is
down serves its cached version and follows the pointer once the database answers, and one
with an empty cache refuses to start in one line.

The commands run in the dev environment (``python -m tttembed`` with this checkout's
``src``), not in a venv built from the page's install line: that build is slow, and
tests/loop/test_guide.py already runs the page's install line (the ``loop`` extra of this
section is the PostgreSQL driver, which the dev environment has)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.loop.test_guide import _stop
from tests.loop.test_replicas import _env, _get, _port, _post, _wait
from tests.test_readme import MODULES, _block

pytest.importorskip("uvicorn")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")

HOST = "db.internal:5432"
CACHE = "/var/cache/tttembed"
TASK = "stdlib-docs"


def _lines(marker: str) -> list[str]:
    text = _block(marker).replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def _exports(lines: list[str]) -> dict[str, str]:
    out = {}
    for ln in lines:
        words = shlex.split(ln)
        if words[0] == "export":
            for w in words[1:]:
                k, v = w.split("=", 1)
                out[k] = v
    return out


def _one(lines: list[str], *head: str) -> str:
    (line,) = [ln for ln in lines if shlex.split(ln)[:len(head)] == list(head)]
    return line


def _password_auth(server: Any, role: str, password: str) -> None:
    """The section's role, owning the database, with a password; TCP connections then
    need it (the test server starts with trust authentication)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(password)))
        conn.execute(sql.SQL("ALTER DATABASE tttembed OWNER TO {}").format(
            sql.Identifier(role)))
    hba = server.root / "data" / "pg_hba.conf"
    lines = [ln for ln in hba.read_text().splitlines()
             if not ln.strip().startswith(("host", "local"))]
    hba.write_text("\n".join([*lines, "local all all trust",
                              "host all all 127.0.0.1/32 md5", "host all all ::1/128 md5"])
                   + "\n")
    subprocess.run([*server.prefix, str(server.bindir / "pg_ctl"), "reload", "-D",
                    str(server.root / "data")], check=True, capture_output=True, timeout=60)


class Machines:
    """The section's commands, each run in the folder of a "machine" of its own."""

    def __init__(self, root: Path, port: int, exports: dict[str, str]) -> None:
        self.root, self.port, self.exports = root, port, exports
        self.stack = ExitStack()

    def folder(self, machine: str) -> Path:
        path = self.root / machine
        if not path.exists():  # the index copied to each machine, as the section says
            path.mkdir(parents=True)
            for sub in ("data", "idx"):
                (path / sub).symlink_to(self.root / "built" / sub)
        return path

    def env(self, machine: str) -> dict[str, str]:
        return {**_env(self.folder(machine)), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", **self.exports}

    def words(self, line: str, machine: str, port: int | None = None) -> list[str]:
        line = line.replace(HOST, f"127.0.0.1:{self.port}")
        line = line.replace(CACHE, str(self.folder(machine) / CACHE.lstrip("/")))
        if port is not None:
            line = line.replace("--port 8000", f"--port {port}")
        words = shlex.split(line)
        assert words[0] == "tttembed", line
        return [sys.executable, "-m", "tttembed", *words[1:]]

    def run(self, line: str, machine: str = "ops") -> subprocess.CompletedProcess:
        return subprocess.run(self.words(line, machine), cwd=self.folder(machine),
                              env=self.env(machine), capture_output=True, text=True,
                              timeout=300)

    @contextmanager
    def start(self, line: str, machine: str, port: int | None = None
              ) -> Iterator[tuple[subprocess.Popen, Path]]:
        log = self.folder(machine) / f"{machine}-{time.monotonic_ns()}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.words(line, machine, port), cwd=self.folder(machine),
                                    env=self.env(machine), stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            yield proc, log
        finally:
            _stop(proc, 30)


def _search(url: str, q: str) -> dict[str, Any]:
    status, body = _post(f"{url}/v1/search", {"query": q, "task": TASK, "k": 10})
    assert status == 200, body
    return body


def _build(root: Path) -> list[str]:
    """The README's demo export and index (the section runs after them)."""
    built = root / "built"
    built.mkdir(parents=True)
    env = _env(built)
    for args in (["demo", "--export", "data/stdlib-docs", "--modules", MODULES],
                 ["index", "data/stdlib-docs", "--out", "idx/stdlib-docs"]):
        r = subprocess.run([sys.executable, "-m", "tttembed", *args], cwd=built, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return [json.loads(ln)["text"] for ln in
            (built / "data/stdlib-docs/queries.jsonl").read_text().splitlines()][:16]


def test_the_several_machines_section_runs_as_written(tmp_path):
    from tests.pg import postgres_instance

    lines = _lines("machines")
    exports = _exports(lines)
    assert "PGPASSWORD" in exports, lines
    learner_line = _one(lines, "tttembed", "loop")
    serve_line = _one(lines, "tttembed", "serve")
    list_line = _one(lines, "tttembed", "states", "list")
    promote_line = _one(lines, "tttembed", "states", "promote")
    role = shlex.split(learner_line)[3].split("://", 1)[1].split("@", 1)[0]
    questions = _build(tmp_path)
    with postgres_instance(tmp_path) as server, ExitStack() as stack:
        _password_auth(server, role, exports["PGPASSWORD"])
        m = Machines(tmp_path, server.port, exports)
        no_password = {k: v for k, v in m.env("ops").items() if k != "PGPASSWORD"}
        r = subprocess.run(m.words(list_line, "ops"), env=no_password, cwd=m.folder("ops"),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0, "the server lets the role in without its password"
        ports = [_port(), _port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        replicas = [stack.enter_context(m.start(serve_line, name, p))
                    for name, p in zip(("machine-a", "machine-b"), ports)]
        learner = stack.enter_context(m.start(learner_line, "learner"))
        procs = [p for p, _ in [*replicas, learner]]
        logs = [log for _, log in [*replicas, learner]]
        for url in urls:
            _wait(url, lambda url=url: _get(f"{url}/healthz"), procs, logs)
        for _ in range(2):  # head questions recur; traffic through both replicas
            for i, q in enumerate(questions):
                _search(urls[i % 2], q)
        _wait("a learning cycle's version", lambda: _get(f"{urls[0]}/v1/loop")["versions"],
              procs, logs, limit=300)

        # a second learner exits at once, one line naming the one that runs
        r = m.run(learner_line, "learner-2")
        said = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode != 0 and "another learner runs on registry" in said[-1], said
        assert f"pid {learner[0].pid}" in said[-1], said

        out = m.run(list_line)
        assert out.returncode == 0 and "v1" in out.stdout, (out.stdout, out.stderr)
        out = m.run(promote_line)
        assert out.returncode == 0, out.stderr
        for url in urls:
            _wait(f"{url} serving v1", lambda url=url: _search(url, questions[0])["version"]
                  == "v1", procs, logs, limit=10)

        def listed() -> str | None:  # every replica's report, and the promotion by hand
            out = m.run(list_line).stdout
            serving = [ln for ln in out.splitlines() if ln.startswith("replica ")
                       and ": serves v1 " in ln and "not the registry" not in ln]
            history = out.split("history:")[-1]
            return out if len(serving) == 2 and "-> v1  by user" in history else None

        _wait("both replicas listed serving v1", listed, procs, logs, limit=60)

        # the database restarted under traffic: no request fails; a promotion after it
        # (a rollback to raw, then v1 again) reaches both replicas
        server.stop()
        for i, q in enumerate(questions):
            status, body = _post(f"{urls[i % 2]}/v1/search", {"query": q, "task": TASK})
            assert status == 200 and body["version"] == "v1", body
            status, body = _post(f"{urls[i % 2]}/v1/embeddings", {"input": q, "model": "m"})
            assert status == 200, body
        health = _get(f"{urls[0]}/healthz")
        server.start()
        assert m.run(list_line.split(" --history")[0].replace("list", "rollback")
                     ).returncode == 0
        for url in urls:
            _wait(f"{url} rolled back", lambda url=url: _search(url, questions[1])["version"]
                  is None, procs, logs, limit=30)
        assert m.run(promote_line).returncode == 0
        for url in urls:
            _wait(f"{url} serving v1 again", lambda url=url: _search(
                url, questions[2])["version"] == "v1", procs, logs, limit=30)
        assert health["status"] in ("ok", "degraded"), health

        # a replica started while the database is down: its cache (then it follows the
        # pointer once the database answers), or one line and no start
        stack.close()  # the replicas and the learner stop
        server.stop()
        with m.start(serve_line, "machine-new", _port()) as (proc, log):
            proc.wait(120)
            said = log.read_text().strip().splitlines()
            assert proc.returncode != 0, said
            assert "no cached served version" in said[-1], said
        port = _port()
        with m.start(serve_line, "machine-a", port) as (proc, log):
            url = f"http://127.0.0.1:{port}"
            _wait("machine-a from its cache", lambda: _get(f"{url}/healthz"), [proc], [log])
            assert _search(url, questions[3])["version"] == "v1"
            server.start()
            assert m.run(list_line.split(" --history")[0].replace("list", "rollback")
                         ).returncode == 0
            _wait("machine-a following again", lambda: _search(url, questions[4])["version"]
                  is None, [proc], [log], limit=60)
