"""The closed loop at a year of traffic: one learner step and the learner's memory with N
logged searches in the store.

    python benchmarks/bench_loop.py --history 10000,100000,1000000 [--stores sqlite,postgresql]
        [--data ../shared/data/scifact] [--docs 1000] [--steps 20] [--work DIR] [--src SRC]

The store is filled with N searches of realistic shape: query texts drawn Zipf(1) from a
real query set (SciFact's 1,109 claims by default; a query's served list is its raw top
10 on an index of the first ``--docs`` documents), spread over the year before now.
Then a learner (``tttembed.loop.run.Loop``, the bm25 judge, the default 600 pairs a
minute, no learning cycle) takes ``--steps`` steps, 0.5 s apart as in production, with a
few new searches logged before each. Each (store, N) runs in a fresh process, so its RSS
is its own. Reported: the first step (it reads the whole history once), the step p50 and
p95 after it, the RSS after the steps, and the store's bytes per logged search.
``--src`` runs the learner from another checkout's ``src`` (e.g. a worktree of an older
commit, for before/after on the same machine in the same run).

Goals (the loop-promises issue): with 1,000,000 logged searches one learner step p50
<= 50 ms, and RSS within +100 MB of the 10,000-search run, on SQLite and PostgreSQL.

Several machines (the registry in PostgreSQL, issue 40):

    python benchmarks/bench_loop.py --replicas 3 [--registry postgresql://USER@HOST:PORT/DB
        --restart-cmd 'systemctl restart postgresql'] [--docs 500] [--promotions 20]
        [--clients 2] [--gap-s 2] [--down-s 3] [--no-learner] [--work DIR]

``--replicas N`` starts N ``tttembed serve --registry URL`` replicas, each with its own
``--registry-cache`` folder (they share nothing but the database), and one learner
(``tttembed loop --registry URL``, the bm25 judge on the traffic, holding the learner's
lock, its ``--min-queries`` out of reach so that it never promotes by itself). Without
``--registry`` a PostgreSQL server is started for the run (tests/pg.py), the registry and
the feedback store in its database. The promotions are made by this script through the
registry's API (``PostgresRegistry.promote(name, by="learner")``, the call the learner
makes): each is then a known commit at a known time, a distinct version registered
beforehand, and no learning cycle competes for the CPU while the latencies are measured.
Traffic: ``--clients`` keep-alive connections per replica (``LoadConnection`` of
bench_serve.py), each request a new text, ``/v1/search`` (4 in 5) or ``/v1/embeddings``.
Per promotion: ``--gap-s`` s idle, the promotion, then ``--gap-s`` s (at least until every
replica serves it); then the database is stopped for ``--down-s`` s and started again
under the same traffic (``--restart-cmd`` restarts a database given by ``--registry``;
without it that goal is not measured), and one more promotion is made once it answers.

Goals: a promotion visible on every replica p99 <= 2 s after the commit (per promotion and
replica: from the return of the promote call to that replica's first /v1/search response
carrying the new ``version``); 0 failed requests (non-200 or connection errors, search
and embeddings) from the stop of the database until the promotion made after its restart
is served everywhere; /v1/search p99 of requests sent during a promotion (the ``--gap-s``
s after it) <= 1.5x the p99 of those sent in the idle gaps between promotions (the same
clients, interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _loop_support import CHILDREN, server_env  # noqa: E402
from _support import DATA, cli, free_port, log_tail, proc_status, wait_healthy  # noqa: E402
from claims import Goal, emit  # noqa: E402

GOALS = {
    "step": Goal("loop history: learner step p50 at 1,000,000 searches ({store})", "<=",
                 0.050, " s"),
    "rss": Goal("loop history: RSS 1,000,000 - 10,000 searches ({store})", "<=", 100.0,
                " MB"),
}
YEAR_S = 365 * 24 * 3600.0
NEW_PER_STEP = 5


def _rss_mb() -> float:
    return proc_status("VmRSS") / 1024


def _world(data: Path, docs: int, work: Path) -> dict[str, Any]:
    """The index over the first ``docs`` documents, and each query's raw top 10 (cached
    in ``work``)."""
    cache = work / f"world-{data.name}-{docs}.json"
    index_dir = work / f"index-{data.name}-{docs}"
    if cache.exists() and index_dir.is_dir():
        return json.loads(cache.read_text())
    import numpy as np

    import tttembed.api as tt
    from tttembed.index.embedder import index_embedder

    corpus: dict[str, dict[str, str]] = {}
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            corpus[row["_id"]] = {"title": row.get("title", ""), "text": row.get("text", "")}
            if len(corpus) >= docs:
                break
    texts = [json.loads(line)["text"] for line in open(data / "queries.jsonl", encoding="utf-8")]
    texts = sorted(set(t for t in texts if t.strip()))
    index = tt.index_corpus(corpus, index_dir, overwrite=True)
    x = index_embedder(index, None).encode(texts, "query")
    _, rows = index.search(np.asarray(x, np.float32), 10)
    ids = index.doc_ids
    corpus_file = work / f"corpus-{data.name}-{docs}.jsonl"
    corpus_file.write_text("".join(json.dumps({"_id": d, **v}) + "\n" for d, v in corpus.items()))
    world = {"index": str(index_dir), "corpus": str(corpus_file), "texts": texts,
             "lists": [[ids[r] for r in row if r >= 0] for row in rows]}
    cache.write_text(json.dumps(world))
    return world


def _zipf(n_queries: int, n: int, seed: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_queries + 1)
    order = rng.permutation(n_queries)
    return order[rng.choice(n_queries, size=n, p=p / p.sum())]


def _fill(store: Any, world: dict[str, Any], n: int, now: float) -> None:
    import numpy as np

    from tttembed.loop.store import SearchLog

    picks = _zipf(len(world["texts"]), n, 0)
    times = np.sort(np.random.default_rng(1).uniform(now - YEAR_S, now - 120.0, n))
    chunk = 20_000
    for lo in range(0, n, chunk):
        store.log_searches([SearchLog(uuid.uuid4().hex, "bench", world["texts"][q], float(t),
                                      None, tuple(world["lists"][q]), "search", "bench")
                            for q, t in zip(picks[lo:lo + chunk], times[lo:lo + chunk])])


def _store_bytes(store: Any, spec: str, reg: Path) -> int:
    if spec.startswith("postgresql"):
        with store._tx() as cur:  # noqa: SLF001  (a benchmark reads the table's size)
            cur.execute("SELECT pg_total_relation_size('searches')")
            return int(cur.fetchone()[0])
    path = reg / "loop.sqlite"
    return sum(p.stat().st_size for p in reg.glob("loop.sqlite*")) if path.exists() else 0


def one(args: argparse.Namespace) -> dict[str, Any]:
    """One (store, N) in this process."""
    from tttembed.core.devices import use_threads

    use_threads(1)
    from tttembed.loop.config import LoopConfig
    from tttembed.loop.open import open_store
    from tttembed.loop.run import Loop
    from tttembed.loop.store import SearchLog

    work = Path(args.work)
    world = json.loads((work / "world.json").read_text())
    reg = Path(tempfile.mkdtemp(prefix="reg-", dir=work))
    spec = args.store_url if args.store == "postgresql" else None
    store = open_store(spec, reg)
    now = time.time()
    t0 = time.perf_counter()
    _fill(store, world, args.one, now)
    fill_s = time.perf_counter() - t0
    size = _store_bytes(store, spec or "", reg)
    os.environ["TTTEMBED_CACHE_DIR"] = str(reg / "cache")
    config = LoopConfig(registry=str(reg), index=world["index"], judge="bm25",
                        store=spec, corpus=world["corpus"], judge_budget=10**9,
                        learn_every=10**9, drift_sample=0)
    rss0 = _rss_mb()
    loop = Loop(config, store=store)
    t0 = time.perf_counter()
    loop.step()
    first = time.perf_counter() - t0
    picks = _zipf(len(world["texts"]), NEW_PER_STEP * args.steps, 2)
    times = []
    for i in range(args.steps):
        time.sleep(0.5)
        stamp = time.time()
        store.log_searches([SearchLog(uuid.uuid4().hex, "bench", world["texts"][q], stamp,
                                      None, tuple(world["lists"][q]), "search", "bench")
                            for q in picks[i * NEW_PER_STEP:(i + 1) * NEW_PER_STEP]])
        t0 = time.perf_counter()
        loop.step()
        times.append(time.perf_counter() - t0)
    times.sort()
    out = {"store": args.store, "n": args.one, "fill_s": fill_s, "first_step_s": first,
           "p50_s": times[len(times) // 2], "p95_s": times[int(0.95 * (len(times) - 1))],
           "rss_mb": _rss_mb(), "rss_before_loop_mb": rss0,
           "bytes_per_search": size / max(args.one, 1), "judged": loop.spent()}
    if spec:  # leave the database empty for the next size
        for table in ("searches", "feedback", "rewards", "spend", "tallies"):
            try:
                with store._tx() as cur:  # noqa: SLF001
                    cur.execute(f"DELETE FROM {table}")
            except Exception:  # noqa: BLE001  (an older store has no spend table)
                pass
    return out


def _child(args: argparse.Namespace, store: str, n: int, url: str | None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n), "--store", store,
           "--work", args.work, "--steps", str(args.steps)]
    if url:
        cmd += ["--store-url", url]
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join([args.src, env.get("PYTHONPATH", "")])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if r.returncode != 0:
        raise SystemExit(f"{store} at {n}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _postgres(work: Path) -> Any:
    sys.path.insert(0, str(HERE.parent))
    from tests.pg import postgres_server

    (work / "pg").mkdir(exist_ok=True)
    return postgres_server(work / "pg")

# -- several machines: N replicas, one learner, the registry in PostgreSQL ---------------
REPLICA_GOALS = {
    "visible": Goal("loop replicas: promotion visible on every replica after the commit, "
                    "p99 over promotions x replicas", "<=", 2.0, " s"),
    "failed": Goal("loop replicas: failed /v1/search + /v1/embeddings requests across a "
                   "PostgreSQL restart", "==", 0.0),
    "ratio": Goal("loop replicas: /v1/search p99 during a promotion / idle (same clients)",
                  "<=", 1.5),
    "after_restart": Goal("loop replicas: promotion after the restart visible on every "
                          "replica, slowest replica", "info", None, " s"),
    "failed_total": Goal("loop replicas: failed requests in the whole run", "info", None),
}
TASK = "bench"
EMBED_SHARE = 0.2
VISIBLE_TIMEOUT_S = 15.0


class _Traffic:
    """``clients`` keep-alive connections per replica in a thread of their own (one asyncio
    loop), until :meth:`stop`. Every request is kept as (replica, kind, sent, done, ok,
    version, error), times ``time.monotonic()``; ``first[(replica, version)]`` is when a
    /v1/search response of that replica first carried that version."""

    def __init__(self, urls: list[str], texts: list[str], clients: int) -> None:
        import threading

        self.urls, self.texts, self.clients = urls, texts, clients
        self.rows: list[tuple[int, str, float, float, bool, Any, str]] = []
        self.first: dict[tuple[int, Any], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> _Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        import asyncio

        asyncio.run(self._main())

    async def _main(self) -> None:
        import asyncio

        from bench_serve import LoadConnection

        conns = []
        for r, url in enumerate(self.urls):
            host, port = url.removeprefix("http://").rsplit(":", 1)
            conns += [(r, c, LoadConnection(host, int(port))) for c in range(self.clients)]
        try:
            await asyncio.gather(*(self._client(r, c, conn) for r, c, conn in conns))
        finally:
            for _, _, conn in conns:
                conn.close()

    async def _client(self, replica: int, c: int, conn: Any) -> None:
        import asyncio
        import random

        from _search_load import fresh

        rng = random.Random(1000 * replica + c)
        i = rng.randrange(len(self.texts))
        while not self._stop.is_set():
            i += 1
            kind = "embeddings" if rng.random() < EMBED_SHARE else "search"
            text = fresh(self.texts, i)
            path, body = ("/v1/embeddings", {"input": text, "model": "m"}) \
                if kind == "embeddings" else ("/v1/search", {"query": text, "task": TASK,
                                                             "k": 10})
            sent = time.monotonic()
            version, error = None, ""
            try:
                status, data = await asyncio.wait_for(conn.post(path, body), 30.0)
                ok = status == 200
                if ok and kind == "search":
                    version = json.loads(data).get("version")
                elif not ok:
                    error = f"{status} {data[:200]!r}"
            except (Exception, SystemExit) as exc:  # noqa: BLE001  (a failure is measured)
                ok, error = False, f"{type(exc).__name__}: {exc}"
                conn.close()
                conn.reader = conn.writer = None  # the next request opens a new connection
            done = time.monotonic()
            self.rows.append((replica, kind, sent, done, ok, version, error))
            if ok and kind == "search":
                self.first.setdefault((replica, version), done)
            if not ok:
                await asyncio.sleep(0.05)

    def wait_visible(self, version: str, since: float, timeout: float) -> list[float]:
        """Seconds from ``since`` to each replica's first response with ``version``
        (inf for a replica that showed none within ``timeout``)."""
        deadline = since + timeout
        n = len(self.urls)
        while time.monotonic() < deadline and \
                any((r, version) not in self.first for r in range(n)):
            time.sleep(0.01)
        return [max(0.0, self.first[(r, version)] - since) if (r, version) in self.first
                else float("inf") for r in range(n)]


def _states(index: Any, n: int, seed: int = 7) -> list[Any]:
    """``n`` distinct task-wise states for the index (a small random vector for the task
    ``TASK`` each): what the registry's versions hold."""
    import numpy as np

    from tttembed.adapt.state import AdaptState

    rng = np.random.default_rng(seed)
    fp = str(index.manifest.get("corpus_fingerprint", ""))
    out = []
    for _ in range(n):
        v = rng.normal(size=(1, index.dim)).astype(np.float32)
        v *= 0.2 / float(np.linalg.norm(v))
        out.append(AdaptState("task", (TASK,), v, np.array([0.5]), np.array([10]),
                              identity=index.identity, dim=index.dim,
                              corpus_fingerprint=fp, scorer="bench"))
    return out


def _p99(xs: list[float]) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(xs), 99)) if xs else float("nan")


def _in_windows(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in windows)


class _Database:
    """The database under test: a server started for the run (``tests/pg.py``), or the
    one at ``--registry`` (restarted by ``--restart-cmd``, when given)."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.server: Any = None
        self._ctx: Any = None

    def __enter__(self) -> str:
        if self.args.registry:
            return str(self.args.registry)
        sys.path.insert(0, str(HERE.parent))
        from tests.pg import postgres_instance

        (self.work / "pg").mkdir(exist_ok=True)
        self._ctx = postgres_instance(self.work / "pg")
        self.server = self._ctx.__enter__()
        return str(self.server.url)

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)

    @property
    def can_restart(self) -> bool:
        return self.server is not None or bool(self.args.restart_cmd)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop("fast")

    def start(self) -> None:
        if self.server is not None:
            self.server.start()

    def restart(self, down_s: float) -> None:
        if self.server is not None:
            self.stop()
            time.sleep(down_s)
            self.start()
        else:
            done = subprocess.run(self.args.restart_cmd, shell=True, capture_output=True,
                                  text=True, timeout=300)
            if done.returncode != 0:
                raise SystemExit(f"--restart-cmd exited {done.returncode}: "
                                 f"{done.stdout[-1000:]}{done.stderr[-1000:]}")


def replicas(args: argparse.Namespace) -> int:
    """The several-machines benchmark (``--replicas N``): see the module's docstring."""
    data = Path(args.data)
    if not (data / "queries.jsonl").exists():
        print(f"skipped: no BEIR folder at {data}")
        return 0
    try:
        import psycopg  # noqa: F401
    except ImportError:
        print("skipped: psycopg is not installed (pip install -e '.[loop]')")
        return 0
    own_work = args.work is None
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-loop-replicas-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t_setup = time.perf_counter()
    world = _world(data, args.docs, work)
    database = _Database(args, work)
    try:
        url = database.__enter__()
    except BaseException as exc:  # noqa: BLE001  (pytest.skip: no PostgreSQL here)
        if type(exc).__name__ == "Skipped":
            print(f"skipped: {exc}")
            return 0
        raise
    try:
        return _replicas_run(args, work, world, url, database, t_setup)
    finally:
        CHILDREN.stop_all()
        database.__exit__(None, None, None)
        if own_work:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


def _replicas_run(args: argparse.Namespace, work: Path, world: dict[str, Any], url: str,
                  database: _Database, t_setup: float) -> int:
    import numpy as np

    from tttembed.index.store import load_index
    from tttembed.registry.base import index_record
    from tttembed.registry.open import open_registry

    index = load_index(world["index"])
    reg = open_registry(url, create=True, index=index_record(index), cache=work / "bench-cache")
    names = [reg.register(st, parent=None, reason=f"bench state {i}").name
             for i, st in enumerate(_states(index, args.promotions + 2))]
    reg.promote(names[0], by="learner", reason="bench: the first served version")
    env = server_env(work / "cache")
    logs, urls, procs = [], [], []
    for r in range(args.replicas):
        port = free_port()
        log = work / f"replica-{r}.log"
        cmd = cli("serve", "--index", world["index"], "--registry", url, "--registry-cache",
                  str(work / f"replica-{r}-cache"), "--port", str(port),
                  "--log-level", "warning")
        procs.append(CHILDREN.start(cmd, log, env))
        urls.append(f"http://127.0.0.1:{port}")
        logs.append(log)
    learner = None
    if args.learner:
        log = work / "learner.log"
        cmd = cli("loop", "--registry", url, "--index", world["index"], "--judge", "bm25",
                  "--corpus", world["corpus"], "--judge-budget", str(args.judge_budget),
                  "--learn-every", "1000000", "--min-queries", "1000000", "--drift-sample",
                  "0")
        learner = CHILDREN.start(cmd, log, env)
        logs.append(log)
    for proc, u, log in zip(procs, urls, logs):
        wait_healthy(u, proc, 600, log)
    if learner is not None:
        from tttembed.loop.coordination import open_coordination

        deadline = time.monotonic() + 300
        while open_coordination(reg).heartbeat() is None:
            if learner.poll() is not None:
                raise SystemExit(f"the learner exited ({learner.returncode}):\n"
                                 f"{log_tail(logs[-1])}")
            if time.monotonic() > deadline:
                raise SystemExit("the learner wrote no heartbeat within 300 s")
            time.sleep(0.3)
    print(f"{args.replicas} replicas (separate --registry-cache folders) and "
          f"{'one learner' if learner else 'no learner'} on {reg.location}, "
          f"{len(world['texts'])} query texts, {args.docs} documents; set up in "
          f"{time.perf_counter() - t_setup:.0f} s", flush=True)

    traffic = _Traffic(urls, world["texts"], args.clients).start()
    during: list[tuple[float, float]] = []
    idle: list[tuple[float, float]] = []
    visible: list[float] = []
    try:
        time.sleep(max(1.0, args.gap_s))  # warm-up: not counted
        if any((r, names[0]) not in traffic.first for r in range(args.replicas)):
            traffic.wait_visible(names[0], time.monotonic(), VISIBLE_TIMEOUT_S)
        for i, name in enumerate(names[1:args.promotions + 1]):
            t0 = time.monotonic()
            time.sleep(args.gap_s)
            idle.append((t0, time.monotonic()))
            call = time.monotonic()
            reg.promote(name, by="learner", reason=f"bench promotion {i + 1}")
            done = time.monotonic()
            seen = traffic.wait_visible(name, done, VISIBLE_TIMEOUT_S)
            visible += seen
            end = max(call + args.gap_s, done + max(seen) + 0.5 if all(
                np.isfinite(seen)) else done + VISIBLE_TIMEOUT_S)
            time.sleep(max(0.0, end - time.monotonic()))
            during.append((call, end))
            print(f"  promotion {i + 1:>2} -> {name}: commit {1000 * (done - call):.0f} ms, "
                  "visible after " + ", ".join(f"{s:.3f}" for s in seen) + " s", flush=True)
        restart_window = None
        after: float | None = None
        if database.can_restart:
            t0 = time.monotonic()
            database.restart(args.down_s)
            up = time.monotonic()
            final = names[args.promotions + 1]
            reg.promote(final, by="learner", reason="bench: after the restart")
            done = time.monotonic()
            seen = traffic.wait_visible(final, done, 60.0)
            after = max(seen)
            time.sleep(1.0)
            restart_window = (t0, time.monotonic())
            print(f"  PostgreSQL stopped for {up - t0:.1f} s and started again; then "
                  f"{final} promoted: visible after " + ", ".join(f"{s:.3f}" for s in seen)
                  + " s", flush=True)
        else:
            final = names[args.promotions]
            print("  no PostgreSQL restart: --registry given without --restart-cmd")
        time.sleep(0.5)
    finally:
        traffic.stop()
    rows = traffic.rows
    search_idle = [d - s for r, k, s, d, ok, v, e in rows
                   if k == "search" and ok and _in_windows(s, idle)]
    search_during = [d - s for r, k, s, d, ok, v, e in rows
                     if k == "search" and ok and _in_windows(s, during)]
    failed = [row for row in rows if not row[4]]
    failed_restart = None if restart_window is None else \
        [row for row in failed if restart_window[0] <= row[2] < restart_window[1]]
    for row in failed[:5]:
        print(f"  failed: replica {row[0]} {row[1]}: {row[6]}")
    n_ok = sum(1 for row in rows if row[4])
    p99_idle, p99_during = _p99(search_idle), _p99(search_during)
    print(f"  {len(rows)} requests ({n_ok} ok, {len(failed)} failed); /v1/search idle "
          f"p50 {1000 * float(np.median(search_idle)):.1f} p99 {1000 * p99_idle:.1f} ms "
          f"({len(search_idle)}), during a promotion p50 "
          f"{1000 * float(np.median(search_during)):.1f} p99 {1000 * p99_during:.1f} ms "
          f"({len(search_during)}); visible p50 {float(np.median(visible)):.3f} max "
          f"{max(visible):.3f} s over {len(visible)} (promotion, replica) pairs", flush=True)
    for u in urls:  # what each replica says it serves
        try:
            import httpx

            got = httpx.get(u + "/v1/loop", timeout=30).json()
            s = got.get("serving", {})
            print(f"  {u}: serving {s.get('version')} (generation {s.get('generation')}, "
                  f"following {s.get('following')}, error {s.get('error')}); replicas "
                  f"reported: {len(got.get('replicas') or [])}")
        except Exception as exc:  # noqa: BLE001  (a report, not a goal)
            print(f"  {u}: /v1/loop failed: {type(exc).__name__}: {exc}")
    if learner is not None:  # the learner is no goal here, but say what became of it
        said = log_tail(logs[-1], 3).splitlines()
        print("  the learner: " + ("still running" if learner.poll() is None else
                                   f"exited ({learner.returncode}): "
                                   f"{said[-1] if said else ''}"))
    reg.close()
    how = (f"{args.replicas} replicas, {args.promotions} promotions, {args.clients} "
           f"clients per replica")
    emit(REPLICA_GOALS, {
        "visible": _p99(visible), "ratio": p99_during / p99_idle,
        "failed": None if failed_restart is None else float(len(failed_restart)),
        "after_restart": after, "failed_total": float(len(failed))}, how)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", default="10000,100000,1000000",
                    help="Comma-separated numbers of logged searches, smallest first.")
    ap.add_argument("--stores", default="sqlite,postgresql",
                    help="sqlite, postgresql (a server started for the run) or both.")
    ap.add_argument("--data", default=str(DATA / "scifact"),
                    help="A BEIR folder: its queries are the traffic, its corpus the index.")
    ap.add_argument("--docs", type=int, default=1000, help="Documents indexed.")
    ap.add_argument("--steps", type=int, default=20, help="Learner steps timed per size.")
    ap.add_argument("--work", default=None, help="Work folder (index cache); default: temp.")
    ap.add_argument("--src", default=None, help="Run the learner from this src folder.")
    ap.add_argument("--timeout", type=float, default=3600, help="Seconds per size at most.")
    ap.add_argument("--replicas", type=int, default=0,
                    help="Several machines: this many `tttembed serve` replicas on a "
                    "PostgreSQL registry, one learner, promotions and a database restart "
                    "under traffic (instead of --history).")
    ap.add_argument("--registry", default=None,
                    help="--replicas: the registry's database, postgresql://USER@HOST:PORT/"
                    "DB; default: a PostgreSQL server started for the run.")
    ap.add_argument("--restart-cmd", default=None,
                    help="--replicas with --registry: a shell command that restarts that "
                    "database (without it the restart goal is not measured).")
    ap.add_argument("--promotions", type=int, default=20, help="--replicas: promotions.")
    ap.add_argument("--clients", type=int, default=2,
                    help="--replicas: keep-alive connections per replica.")
    ap.add_argument("--gap-s", type=float, default=2.0,
                    help="--replicas: idle seconds before each promotion, and seconds "
                    "counted as during it after it.")
    ap.add_argument("--down-s", type=float, default=3.0,
                    help="--replicas: seconds the database stays stopped.")
    ap.add_argument("--judge-budget", type=int, default=300,
                    help="--replicas: the learner's judge pairs (bm25) on the traffic.")
    ap.add_argument("--learner", action=argparse.BooleanOptionalAction, default=True,
                    help="--replicas: run the one learner beside the replicas.")
    ap.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store", default="sqlite", help=argparse.SUPPRESS)
    ap.add_argument("--store-url", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.replicas:
        return replicas(args)
    if args.registry or args.restart_cmd:
        ap.error("--registry and --restart-cmd go with --replicas N")
    if args.one:
        print(json.dumps(one(args)))
        return 0
    data = Path(args.data)
    if not (data / "queries.jsonl").exists():
        print(f"skipped: no BEIR folder at {data}")
        return 0
    args.work = args.work or tempfile.mkdtemp(prefix="bench-loop-history-")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "world.json").write_text(json.dumps(_world(data, args.docs, work)))
    sizes = [int(s) for s in args.history.split(",") if s.strip()]
    rows = []
    for store in [s.strip() for s in args.stores.split(",") if s.strip()]:
        server = _postgres(work) if store == "postgresql" else None
        url = server.__enter__() if server is not None else None
        try:
            for n in sizes:
                row = _child(args, store, n, url)
                rows.append(row)
                print(f"{store:<10} {n:>9,} searches: first step {row['first_step_s']:.3f} s, "
                      f"step p50 {1000 * row['p50_s']:.1f} ms p95 {1000 * row['p95_s']:.1f} ms, "
                      f"RSS {row['rss_mb']:.0f} MB, {row['bytes_per_search']:.0f} B/search "
                      f"(fill {row['fill_s']:.1f} s)", flush=True)
        finally:
            if server is not None:
                server.__exit__(None, None, None)
        mine = [r for r in rows if r["store"] == store]
        top = max(mine, key=lambda r: r["n"])
        low = min(mine, key=lambda r: r["n"])
        goals = {k: Goal(g.claim.format(store=store), g.op, g.target, g.unit)
                 for k, g in GOALS.items()}
        note = "" if (low["n"], top["n"]) == (10_000, 1_000_000) else \
            f"measured at {low['n']:,} -> {top['n']:,} searches"
        emit(goals, {"step": top["p50_s"], "rss": top["rss_mb"] - low["rss_mb"]}, note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
