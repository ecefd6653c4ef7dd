"""A real PostgreSQL server for the tests, on 127.0.0.1 and a free port.

``postgres_server(tmp_path)`` (a context manager) runs ``initdb`` into a fresh folder,
starts the server with ``pg_ctl`` (trust authentication, listening on 127.0.0.1 only,
its Unix socket in that folder, fsync off), waits until it accepts connections, creates
the database ``tttembed`` and yields its URL, ``postgresql://postgres@127.0.0.1:PORT/tttembed``;
on exit it stops the server (``pg_ctl stop -m immediate``) and removes the folder, after
copying the server log to ``tmp_path / "postgres.log"``.

PostgreSQL refuses to run as root: as root the binaries run as the ``postgres`` user
(``runuser -u postgres --``) in a folder made by ``tempfile.mkdtemp`` and chowned to it
(pytest's own tmp folders are private to root). Otherwise they run directly.

The binaries are looked up on PATH, then in ``/usr/lib/postgresql/*/bin`` (where
Debian's ``postgresql`` package puts them); without ``initdb`` the test is skipped with
the reason (``apt-get install -y postgresql`` provides it).

``new_database(url, name)`` creates one more database on the same server (a test that
wants tables of its own) and gives its URL.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

USER = "postgres"
DATABASE = "tttembed"
SETTINGS = ("-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200")


def postgres_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: [int(x) for x in re.findall(r"\d+", p)])
    return Path(candidates[-1]).parent if candidates else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user() -> list[str]:
    """The command prefix that runs a PostgreSQL binary (``runuser`` when root)."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root and runuser is missing: PostgreSQL refuses root")
    try:
        import pwd

        pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"running as root and there is no {USER!r} user to run PostgreSQL as")
    return [runuser, "-u", USER, "--"]


def _run(cmd: list[str], cwd: Path, what: str, timeout: float = 120) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {' '.join(cmd)}\n"
                           f"{done.stdout}\n{done.stderr}")


def _make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="tttembed-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, USER, USER)
    return root


def _start(bindir: Path, prefix: list[str], root: Path) -> int:
    """Start the server on a free port (three tries, in case another process takes the
    port first); the port it listens on."""
    log = root / "postgres.log"
    said = ""
    for _ in range(3):
        port = free_port()
        cmd = [*prefix, str(bindir / "pg_ctl"), "start", "-D", str(root / "data"),
               "-l", str(log), "-w", "-t", "60", "-o", f"-p {port} -k {root} {SETTINGS}"]
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=90)
        if done.returncode == 0 and _accepts(port):
            return port
        said = f"{done.stdout}\n{done.stderr}"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"PostgreSQL did not start: {said}\n{tail}")


def _accepts(port: int, timeout: float = 30.0) -> bool:
    """Wait until the server accepts TCP connections on ``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class PgServer:
    """A running test server: ``url``, and ``stop()`` / ``start()`` / ``restart()`` on
    the same port and data (a restart under traffic, a replica started while it is down)."""

    def __init__(self, bindir: Path, prefix: list[str], root: Path, port: int) -> None:
        self.bindir, self.prefix, self.root, self.port = bindir, prefix, root, port
        self.url = f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}"
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "stop", "-D",
                        str(self.root / "data"), "-m", mode, "-w"], cwd=self.root,
                       capture_output=True, timeout=60)
        self.running = False

    def start(self) -> None:
        cmd = [*self.prefix, str(self.bindir / "pg_ctl"), "start", "-D",
               str(self.root / "data"), "-l", str(self.root / "postgres.log"), "-w",
               "-t", "60", "-o", f"-p {self.port} -k {self.root} {SETTINGS}"]
        done = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True,
                              timeout=90)
        if done.returncode != 0 or not _accepts(self.port):
            raise RuntimeError(f"PostgreSQL did not start again: {done.stdout}\n"
                               f"{done.stderr}")
        self.running = True

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()


@contextmanager
def postgres_instance(tmp_path: Path | None = None) -> Iterator[PgServer]:
    """A running PostgreSQL server with the database ``tttembed`` (a :class:`PgServer`)."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (no initdb on PATH or in "
                    "/usr/lib/postgresql/*/bin): apt-get install -y postgresql")
    prefix = _as_server_user()
    root = _make_root()
    server: PgServer | None = None
    try:
        _run([*prefix, str(bindir / "initdb"), "-D", str(root / "data"), "-U", USER,
              "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"], root, "initdb")
        port = _start(bindir, prefix, root)
        server = PgServer(bindir, prefix, root, port)
        _run([*prefix, str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port),
              "-U", USER, DATABASE], root, "createdb")
        yield server
    finally:
        if server is not None and server.running:
            server.stop("immediate")
        if tmp_path is not None and (root / "postgres.log").exists():
            shutil.copyfile(root / "postgres.log", Path(tmp_path) / "postgres.log")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def postgres_server(tmp_path: Path | None = None) -> Iterator[str]:
    """A running PostgreSQL server with the database ``tttembed``: its URL."""
    with postgres_instance(tmp_path) as server:
        yield server.url


def new_database(url: str, name: str) -> str:
    """Create the database ``name`` on the server of ``url`` (psycopg): its URL."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def database_fixtures(prefix: str) -> tuple[Any, Any]:
    """A test module's PostgreSQL: ``pg_cluster``, one server for the module (a
    :class:`PgServer` its tests may stop and restart), and ``url``, a fresh database on it
    per test named ``prefix`` + the test's name. In a module:
    ``pg_cluster, url = database_fixtures("r_")``."""

    @pytest.fixture(scope="module")
    def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
        with postgres_instance(tmp_path_factory.mktemp("pg")) as srv:
            yield srv

    @pytest.fixture
    def url(pg_cluster: PgServer, request: pytest.FixtureRequest) -> str:
        if not pg_cluster.running:
            pg_cluster.start()
        return new_database(pg_cluster.url, prefix + request.node.name[:40].lower())

    return pg_cluster, url
