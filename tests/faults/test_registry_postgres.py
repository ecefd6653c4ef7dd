"""Replicas on several machines sharing nothing but PostgreSQL (real processes, a real
server): every replica follows a promotion at once and reports what it serves; a
PostgreSQL restart under traffic fails no search or embeddings request and a promotion
made meanwhile is picked up; a replica started while the database is down serves its
cached version (or refuses to start, in one line, without one); a second learner exits
naming the holder; a learner killed mid-promotion leaves the old pointer, never half a
version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.loop.test_loop import QUERIES, TASK, world  # noqa: F401  (fixture)
from tests.loop.test_replicas import _env, _get, _port, _post, _process, _wait
from tests.pg import database_fixtures
from tttembed.loop.coordination import open_coordination

pytest.importorskip("uvicorn")
pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")


pg_cluster, url = database_fixtures("f_")


def _state(w: dict[str, Any], seed: int) -> Any:
    from tttembed.adapt.state import AdaptState

    index = w["index"]
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(1, index.dim)).astype(np.float32) * 0.1
    return AdaptState("task", (TASK,), v, np.full(1, 0.5), np.ones(1, np.int64),
                      identity=index.identity, dim=index.dim,
                      corpus_fingerprint=str(index.manifest.get("corpus_fingerprint", "")))


def _registry(url: str, w: dict[str, Any], cache: Path) -> Any:
    from tttembed.registry.base import index_record
    from tttembed.registry.postgres import PostgresRegistry

    return PostgresRegistry(url, create=True, index=index_record(w["index"]), cache=cache)


def _replica(stack: ExitStack, w: dict[str, Any], url: str, tmp: Path, name: str,
             env: dict[str, str]) -> tuple[str, Any, Path]:
    port = _port()
    log = tmp / f"{name}.log"
    proc = stack.enter_context(_process(
        ["serve", "--index", str(w["root"] / "index"), "--port", str(port),
         "--registry", url, "--registry-cache", str(tmp / f"cache-{name}")], env, log))
    return f"http://127.0.0.1:{port}", proc, log


def _version(base: str) -> Any:
    status, body = _post(f"{base}/v1/search", {"query": QUERIES[0], "task": TASK, "k": 5})
    return body["version"] if status == 200 else ("failed", status)


class Traffic:
    """Searches and embeddings against every replica from a thread each, counting what
    failed (a non-200 answer or a connection error)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls, self.stop, self.ok, self.failed = urls, threading.Event(), 0, []
        self.threads = [threading.Thread(target=self._run, args=(u,), daemon=True)
                        for u in urls]

    def _run(self, base: str) -> None:
        i = 0
        while not self.stop.is_set():
            route, body = (("/v1/search", {"query": QUERIES[i % len(QUERIES)], "task": TASK})
                           if i % 2 == 0 else
                           ("/v1/embeddings", {"input": QUERIES[i % len(QUERIES)],
                                               "model": "m", "task": TASK,
                                               "input_type": "query"}))
            try:
                status, got = _post(base + route, body)
            except Exception as exc:  # noqa: BLE001  (a refused connection is a failure)
                self.failed.append(f"{base}{route}: {exc}")
            else:
                if status == 200:
                    self.ok += 1
                else:
                    self.failed.append(f"{base}{route}: {status} {got}")
            i += 1
            time.sleep(0.02)

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def test_replicas_follow_promotions_and_survive_a_database_restart(world, url, pg_cluster,  # noqa: F811
                                                                   tmp_path):
    """Two replicas (their own cache folders) follow every promotion within 2 s and report
    it; a PostgreSQL restart under search and embeddings traffic fails 0 requests, and a
    promotion made right after the restart reaches both replicas; a replica restarted
    while the database is down serves its cached version, one with an empty cache refuses
    to start in one line."""
    reg = _registry(url, world, tmp_path / "learner-cache")
    v1 = reg.register(_state(world, 1), reason="test").name
    v2 = reg.register(_state(world, 2), reason="test").name
    reg.promote(v1, by="learner")
    env = _env(tmp_path)
    with ExitStack() as stack:
        reps = [_replica(stack, world, url, tmp_path, n, env) for n in ("a", "b")]
        procs, logs = [r[1] for r in reps], [r[2] for r in reps]
        for base, _, _ in reps:
            _wait(base, lambda base=base: _get(f"{base}/healthz"), procs, logs)
            assert _version(base) == v1
        t0 = time.monotonic()
        reg.promote(v2, by="user")
        for base, _, _ in reps:
            _wait(f"{base} serving {v2}", lambda base=base: _version(base) == v2, procs, logs,
                  limit=10)
        assert time.monotonic() - t0 < 4.0  # NOTIFY: both within the poll's reach
        loop = _get(f"{reps[0][0]}/v1/loop")
        assert loop["serving"]["version"] == v2 and loop["following"] is True
        coord = open_coordination(reg)
        _wait("both replicas reported", lambda: {r["version"] for r in coord.replicas()}
              == {v2} and len(coord.replicas()) == 2, procs, logs, limit=10)

        # a version learned on another corpus: every replica refuses it and says so
        foreign = _state(world, 3)
        object.__setattr__(foreign, "corpus_fingerprint", "another-corpus")
        v3 = reg.register(foreign, reason="foreign").name
        reg.promote(v3, by="user")  # unchecked: the replicas are the last line
        _wait("both replicas refused v3", lambda: all(
            (r.get("refused") or {}).get("version") == v3 for r in coord.replicas())
            and len(coord.replicas()) == 2, procs, logs, limit=15)
        assert all(_version(b) == v2 for b, _, _ in reps)  # still the version before
        loop = _get(f"{reps[1][0]}/v1/loop")
        assert loop["version"] == v3 and loop["serving"]["version"] == v2
        assert loop["following"] is False
        listed = subprocess.run([sys.executable, "-m", "tttembed", "states", "list", url],
                                env=env, capture_output=True, text=True, timeout=120)
        assert listed.stdout.count(f"serves {v2}") == 2, listed.stdout
        assert listed.stdout.count(f"REFUSED {v3}") == 2, listed.stdout

        with Traffic([r[0] for r in reps]) as traffic:
            time.sleep(1.0)
            pg_cluster.restart()
            reg.promote(v1, by="user", reason="meanwhile")
            for base, _, _ in reps:
                _wait(f"{base} back on {v1}", lambda base=base: _version(base) == v1, procs,
                      logs, limit=30)
            time.sleep(1.0)
        assert traffic.ok > 20 and traffic.failed == [], traffic.failed[:5]
        assert all(_get(f"{b}/v1/loop")["following"] for b, _, _ in reps)

        # a replica restarted while the database is down serves the version it cached
        pg_cluster.stop()
        procs[0].terminate()
        procs[0].wait(30)
        base, proc, log = _replica(stack, world, url, tmp_path, "a", env)
        _wait(f"{base} (database down)", lambda: _get(f"{base}/healthz"), [proc], [log])
        assert _version(base) == v1
        health = _get(f"{base}/healthz")
        assert health["status"] == "degraded" and health["following"] is False
        # a replica with nothing cached refuses to start, in one line
        out = subprocess.run([sys.executable, "-m", "tttembed", "serve", "--index",
                              str(world["root"] / "index"), "--port", str(_port()),
                              "--registry", url, "--registry-cache", str(tmp_path / "new")],
                             env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode != 0
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.startswith("error")]
        assert len(lines) == 1 and "no cached served version" in lines[0], out.stderr[-2000:]
        pg_cluster.start()
        reg.promote(v2, by="user")
        _wait(f"{base} following again", lambda: _version(base) == v2, [proc], [log],
              limit=30)


def _loop_args(w: dict[str, Any], url: str, tmp: Path, name: str) -> list[str]:
    return ["loop", "--registry", url, "--index", str(w["root"] / "index"),
            "--judge", "bm25", "--corpus", str(w["corpus"]), "--judge-budget", "200",
            "--judge-rpm", "60000", "--learn-every", "1000", "--min-queries", "2",
            "--registry-cache", str(tmp / f"cache-{name}")]


def test_a_second_learner_exits_naming_the_holder(world, url, tmp_path):  # noqa: F811
    """One learner per registry: a second ``tttembed loop`` on the same database exits
    non-zero with one line naming the first (its pid and host); when the first stops,
    the lock is free again."""
    _registry(url, world, tmp_path / "c").close()
    env = _env(tmp_path)
    log = tmp_path / "first.log"
    with _process(_loop_args(world, url, tmp_path, "first"), env, log) as first:
        from tttembed.registry.postgres import PostgresRegistry

        coord = open_coordination(PostgresRegistry(url, cache=tmp_path / "c"))
        _wait("the first learner's heartbeat", lambda: (coord.heartbeat() or {}).get("pid")
              == first.pid, [first], [log], limit=120)
        out = subprocess.run([sys.executable, "-m", "tttembed",
                              *_loop_args(world, url, tmp_path, "second")], env=env,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode != 0, out.stderr[-2000:]
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error")]
        assert len(errors) == 1 and f"pid {first.pid}" in errors[0] and \
            "another learner runs on registry" in errors[0], out.stderr[-2000:]
        status, _ = coord.read_status()
        assert status is not None and status.get("pid") == first.pid  # rows, not a file
    with coord.learner_lock():  # the first stopped: its session lock went with it
        pass


@pytest.mark.parametrize("point", ["registry:promote", "registry:insert"])
def test_a_learner_killed_mid_write_leaves_the_old_pointer(world, url, tmp_path, point):  # noqa: F811
    """SIGKILL inside the promotion's transaction (after the history row and the pointer
    update, before the commit) or inside a version's insert: the registry serves the old
    version, its history has no entry of the killed write, no version row is half
    written, and every version still loads and matches its id."""
    from tests.faults.conftest import killed, run_py

    reg = _registry(url, world, tmp_path / "c")
    v1 = reg.register(_state(world, 1)).name
    reg.promote(v1, by="learner")
    before = reg.served_record()
    code = (
        "import numpy as np\n"
        "from tttembed.adapt.state import AdaptState\n"
        "from tttembed.registry.postgres import PostgresRegistry\n"
        f"reg = PostgresRegistry({url!r}, cache={str(tmp_path / 'k')!r})\n"
        "st = reg.get('v1').load()\n"
        "st2 = AdaptState(st.scope, st.keys, st.vectors * 2, st.alpha, st.n_g,\n"
        "                 identity=st.identity, dim=st.dim,\n"
        "                 corpus_fingerprint=st.corpus_fingerprint)\n"
        "v = reg.register(st2, reason='killed')\n"
        "reg.promote(v.name, by='learner')\n")
    done = run_py(code, fault=point)
    assert killed(done), done.stderr[-2000:]
    after = reg.served_record()
    assert after["served"] == v1 and after["history"] == before["history"]
    names = [v.name for v in reg.versions()]
    assert names == ([v1] if point == "registry:insert" else [v1, "v2"])
    shutil.rmtree(tmp_path / "c" / "versions")  # fetched anew, checked against each id
    for name in names:
        assert reg.get(name).load().keys == (TASK,)


def test_the_learner_survives_a_database_outage(world, url, pg_cluster, tmp_path):  # noqa: F811
    """PostgreSQL down for 8 s under a running ``tttembed loop``: the learner keeps
    running (its failing steps logged, not fatal), and beats again once the database is
    back, holding its lock."""
    from tttembed.registry.postgres import PostgresRegistry

    _registry(url, world, tmp_path / "c").close()
    env = _env(tmp_path)
    log = tmp_path / "loop.log"
    with _process(_loop_args(world, url, tmp_path, "l"), env, log) as proc:
        registry = PostgresRegistry(url, cache=tmp_path / "c")
        coord = open_coordination(registry)
        _wait("a heartbeat", lambda: (coord.heartbeat() or {}).get("pid") == proc.pid,
              [proc], [log], limit=120)
        registry.close()
        pg_cluster.stop()
        time.sleep(8.0)
        assert proc.poll() is None, log.read_text()[-3000:]
        pg_cluster.start()
        since = time.time()
        _wait("a heartbeat after the outage", lambda: float(
            (coord.heartbeat() or {}).get("time", 0)) > since, [proc], [log], limit=60)
        with pytest.raises(Exception, match="another learner"):
            with coord.learner_lock():
                pass
        assert proc.poll() is None
