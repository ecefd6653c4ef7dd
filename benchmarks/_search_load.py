"""The search half of ``bench_serve.py``: ``POST /v1/search`` under load.

Three servers on the same demo index, one after the other: a task-wise state
(``--state``), a ``--method auto`` state (``--state``; mixed: query-wise texts and the
task's vector) and the task-wise state promoted in a registry (``--registry``: every
query logged in its traffic store). Each serves 1, 8 and 32 concurrent single-query
keep-alive clients, every request raw (task ``_``: no task-wise state applies) or adapted
(the demo task) at random, ``k`` = :data:`K`, a new text each time (no cache hit).

The reference is the bare pipeline in a fresh process on the same index (:func:`bare`):
the bundled model embeds batches of 32 new texts and one FAISS call searches each batch
(texts/s), and one new text embedded and searched alone (its p50), measured right before
each slice of the 1- and 32-client levels. Goals: 32 clients >= 0.8x the bare batched
throughput (median of the slices); one client's raw p50 <= 1.2x the bare one-text p50 +
2 ms; adapted / raw p50 and p99 <= 1.05 (<= 1.1 with the traffic log on).

    python benchmarks/_search_load.py --bare INDEX < texts.json   (internal)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _support import pct, start_serve, stop
from claims import Goal

K = 10
RATIO = 1.05
LOG_RATIO = 1.1
GOALS = {
    "search_batched": Goal("serve search: 32 single-query clients, req/s / bare batched "
                           "embed+search texts/s, worst state", ">=", 0.8),
    "search_one": Goal("serve search: one client raw p50 / (1.2 x bare one-query p50 + 2 ms), "
                       "worst state", "<=", 1.0),
    "search_ratio": Goal("serve search: adapted / raw latency, worst of p50 and p99 over "
                         "client counts and states", "<=", RATIO),
    "search_logged": Goal("serve search --registry (traffic logged): adapted / raw latency, "
                          "worst of p50 and p99", "<=", LOG_RATIO),
    "search_logged_batched": Goal("serve search --registry: 32 clients req/s / bare batched",
                                  "info", None),
}
SERIAL = itertools.count()


def fresh(texts: list[str], i: int) -> str:
    """A new query of the same shape for the server and the bare reference."""
    return f"{texts[i % len(texts)]} (query {next(SERIAL):06d})"


STATES = ("task", "auto", "registry")


def configs(work: Path, index: Path, folder: Path, task_state: Path,
            which: Sequence[str] = STATES) -> dict[str, list[str]]:
    """The servers' state options: a task state, an auto state, a registry (``which``)."""
    import tttembed.api as tt
    from tttembed.adapt.state import load_state
    from tttembed.index.store import load_index
    from tttembed.registry.versions import Registry, index_record

    out = {"task state": ["--state", str(task_state)]} if "task" in which else {}
    if "auto" in which:
        auto = tt.learn(load_index(index), folder, scorer=f"qrels:{folder}", scope="task", budget=10,
                        method="auto").save(work / "auto.npz")
        out["auto state"] = ["--state", str(auto)]
    if "registry" in which:
        reg = Registry(work / "registry", create=True, index=index_record(load_index(index)))
        reg.promote(reg.register(load_state(task_state)).name)
        out["task state, --registry"] = ["--registry", str(work / "registry")]
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of process ``pid`` ({} once gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def busy_cores() -> float:
    """CPU seconds every process of the machine has used so far (/proc/stat, all CPUs,
    idle and iowait excluded)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def cpu_profile(pid: int, before: dict[int, float], after: dict[int, float], n: int,
                wall: float, machine: float = float("nan"), client: float = float("nan")
                ) -> str:
    """Where the CPU went during a phase of ``n`` requests (``wall`` seconds): the
    server's event loop (its main thread), its three busiest other threads (the model
    thread first; then torch's OpenMP worker when the model runs on two threads, the
    search thread, the anyio worker that renders and logs a ``--registry`` search) and
    the rest of its threads summed, per request; the load client's own CPU (``client``
    seconds) and what the rest of the machine used (``machine``: every process's CPU
    seconds, from /proc/stat, less the server's and the client's) in cores."""
    used = {t: after[t] - before.get(t, 0.0) for t in after}
    loop = used.pop(pid, 0.0)
    top = sorted(used.values(), reverse=True)
    busy = [u for u in top if u > 0]
    total = loop + sum(top)
    head = ", ".join(f"{u / n * 1000:.2f}" for u in top[:3])
    rest = sum(top[3:])
    return (f"server CPU {total / n * 1000:.2f} ms/req ({total / wall:.2f} cores): event "
            f"loop {loop / n * 1000:.2f}, top threads {head}, {len(busy) - min(3, len(busy))}"
            f" other busy threads {rest / n * 1000:.2f} ms/req; load client "
            f"{client / n * 1000:.2f} ms/req; the rest of the machine (other processes) "
            f"{(machine - total - client) / wall:.2f} cores")


def search_section(connect: Callable[[str, int], Any], work: Path, index: Path, task: str,
                   task_state: Path, texts: list[str], args: Any, deadline: float,
                   measured: dict[str, float]) -> list[bool]:
    """Every configured server in turn (started, measured, stopped)."""
    which = [w for w in args.search_states.split(",") if w]
    levels = [int(x) for x in args.search_clients.split(",")]
    ok: list[bool] = []
    print(f"search: /v1/search k={K}, raw (task _) vs adapted at random, vs the bare "
          "embed + FAISS pipeline")
    for name, states in configs(work, index, work / "demo", task_state, which).items():
        proc, url = start_serve(index, states, args.server_args.split())
        try:
            ok += run_state(connect, name, url, index, task, texts, levels,
                            args.search_requests, args.rounds, deadline, measured,
                            pid=proc.pid)
        finally:
            stop(proc)
    return ok


async def phase(connect: Callable[[str, int], Any], url: str, task: str, texts: list[str],
                clients: int, n: int, deadline: float) -> dict[str, list[float]]:
    """``n`` single-query searches from ``clients`` connections, raw or adapted at random;
    every response checked (200, one result list of ``K`` ids)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    lat: dict[str, list[float]] = {"raw": [], "adapted": []}
    tasks = {"raw": "_", "adapted": task}
    kinds = random.Random(clients).choices(("raw", "adapted"), k=n)
    counter = iter(range(n))

    async def client(conn: Any) -> None:
        for i in counter:
            if time.monotonic() > deadline:
                return
            body = {"query": fresh(texts, i), "task": tasks[kinds[i]], "k": K}
            t0 = time.perf_counter()
            status, data = await conn.post("/v1/search", body)
            dt = time.perf_counter() - t0
            got = json.loads(data) if status == 200 else {}
            if status != 200 or len(got["data"]) != 1 or len(got["data"][0]["ids"]) != K:
                raise SystemExit(f"search failed: {status} {data[:200]!r}")
            lat[kinds[i]].append(dt)

    conns = [connect(host, int(port)) for _ in range(clients)]
    try:
        await asyncio.gather(*(client(c) for c in conns))
    finally:
        for c in conns:
            c.close()
    return lat


def bare_reference(index: Path, texts: list[str]) -> tuple[float, float]:
    """:func:`bare` in a fresh process (no other thread has run torch or FAISS there)."""
    out = subprocess.run([sys.executable, __file__, "--bare", str(index)],
                         input=json.dumps(texts), capture_output=True, text=True, check=True)
    rate, one = json.loads(out.stdout.strip().splitlines()[-1])
    return float(rate), float(one)


def bare(index_path: Path, texts: list[str], batch: int = 32, batches: int = 24
         ) -> tuple[float, float]:
    """Embed batches of ``batch`` new texts and search each in one FAISS call (texts/s),
    and the p50 seconds of one new text embedded and searched, from the main thread."""
    from tttembed.embed.cache import load_embedder
    from tttembed.index.store import load_index

    emb = load_embedder("st:bundled:all-MiniLM-L6-v2", cache=False)
    index = load_index(index_path)
    index.search(emb.encode(texts[:batch], "query"), K)  # load, warm up
    t0 = time.perf_counter()
    for b in range(batches):
        index.search(emb.encode([fresh(texts, b * batch + i) for i in range(batch)],
                                "query"), K)
    rate = batch * batches / (time.perf_counter() - t0)
    one = []
    for i in range(40):
        t = time.perf_counter()
        index.search(emb.encode([fresh(texts, i)], "query"), K)
        one.append(time.perf_counter() - t)
    return rate, float(np.median(one))


def run_state(connect: Callable[[str, int], Any], name: str, url: str, index: Path,
              task: str, texts: list[str], levels: Sequence[int], n: int, rounds: int,
              deadline: float, measured: dict[str, float], pid: int | None = None
              ) -> list[bool]:
    """Every client level against one server; updates ``measured``; one bool per goal.
    With the server's ``pid``, each level also prints where the server's CPU went."""
    logged = "registry" in name
    ok: list[bool] = []
    for clients in levels:
        paired = clients in (1, 32)
        lat: dict[str, list[float]] = {"raw": [], "adapted": []}
        stats, wall = [], 0.0
        cpu0: dict[int, float] = {}
        cpu1: dict[int, float] = {}
        machine = client = 0.0
        for _ in range(max(1, rounds) if paired else 1):
            ref = bare_reference(index, texts) if paired else (0.0, 0.0)
            before = thread_cpu(pid) if pid is not None else {}
            m0, c0 = busy_cores(), time.process_time()
            t0 = time.perf_counter()
            got = asyncio.run(phase(connect, url, task, texts, clients,
                                    n // (rounds if paired else 1), deadline))
            dt = time.perf_counter() - t0
            machine += busy_cores() - m0
            client += time.process_time() - c0
            if pid is not None:  # the slices' CPU only, not the references' idle time
                after = thread_cpu(pid)
                for t, v in after.items():
                    cpu1[t] = cpu1.get(t, 0.0) + v
                    cpu0[t] = cpu0.get(t, 0.0) + before.get(t, 0.0)
            wall += dt
            for kind in lat:
                lat[kind] += got[kind]
            stats.append(((len(got["raw"]) + len(got["adapted"])) / dt, *ref))
        ok += report(name, clients, lat, wall, stats if paired else [], logged, measured)
        if pid is not None and cpu1:
            print("      " + cpu_profile(pid, cpu0, cpu1,
                                         len(lat["raw"]) + len(lat["adapted"]), wall,
                                         machine, client))
    return ok


def _worst(measured: dict[str, float], key: str, value: float, high: bool = True) -> None:
    old = measured.get(key)
    measured[key] = value if old is None else (max(old, value) if high else min(old, value))


def report(name: str, clients: int, lat: dict[str, list[float]], wall: float,
           stats: list[tuple[float, float, float]], logged: bool,
           measured: dict[str, float]) -> list[bool]:
    p = {k: (pct(v, 50), pct(v, 99)) for k, v in lat.items()}
    r50, r99 = p["adapted"][0] / p["raw"][0], p["adapted"][1] / p["raw"][1]
    n = len(lat["raw"]) + len(lat["adapted"])
    print(f"  [{name}] {clients:>3} clients {n:>6} req {n / wall:7.1f} req/s  raw p50 "
          f"{p['raw'][0]:7.2f} p99 {p['raw'][1]:7.2f} ms  adapted p50 {p['adapted'][0]:7.2f}"
          f" p99 {p['adapted'][1]:7.2f} ms  ratio p50 {r50:.3f} p99 {r99:.3f}")
    limit_ratio = LOG_RATIO if logged else RATIO
    ok = [r50 <= limit_ratio, r99 <= limit_ratio]
    _worst(measured, "search_logged" if logged else "search_ratio", max(r50, r99))
    if clients == 32 and stats:
        share = float(np.median([rate / ref for rate, ref, _ in stats]))
        print("      32 clients: " + ", ".join(f"{rate:.1f} req/s / bare {ref:.1f}/s"
                                                for rate, ref, _ in stats)
              + f"; median {share:.2f}x (goal >= 0.8)")
        _worst(measured, "search_logged_batched" if logged else "search_batched", share,
               high=False)
        ok += [] if logged else [share >= 0.8]
    if clients == 1 and stats and not logged:
        one = float(np.median([s[2] for s in stats]))
        limit = 1.2 * one * 1000 + 2
        print(f"      1 client: raw p50 {p['raw'][0]:.2f} ms vs bare {one * 1000:.2f} ms "
              f"(goal <= {limit:.2f} ms)")
        _worst(measured, "search_one", p["raw"][0] / limit)
        ok.append(p["raw"][0] <= limit)
    return ok


if __name__ == "__main__" and sys.argv[1:2] == ["--bare"]:
    print(json.dumps(bare(Path(sys.argv[2]), json.loads(sys.stdin.read()))))
