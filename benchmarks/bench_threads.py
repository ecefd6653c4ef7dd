"""The thread policy (``tttembed.core.devices``) against pinned settings, with 0 and 1 busy
cores, on the bundled all-MiniLM-L6-v2 (one command):

    python benchmarks/bench_threads.py

Each (condition, setting) runs in a fresh process: ``default`` (the policy: the CPUs no
other process keeps busy), ``one`` (pinned to 1 thread), ``all`` (pinned to every CPU of
the affinity). A busy core is another process spinning on one CPU. Measured in the same
run: throughput of ``encode`` on 256 short texts (``--texts``; texts/s, best of 3) and the
p50 latency of one short query (30 calls). Ratios only (this machine is shared and noisy).

Goals (issue 26): default >= 0.8x the best pinned throughput in both conditions; one short
query with a busy core within 2x of its idle latency. ``--conditions`` and ``--settings``
run a subset (a quick look: the claims that need the rest are then not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _support import write_json
from claims import Goal, emit

GOALS = {
    "idle": Goal("threads: default throughput / best pinned, idle machine", ">=", 0.8),
    "busy": Goal("threads: default throughput / best pinned, one core busy", ">=", 0.8),
    "latency": Goal("threads: one short query, p50 busy / p50 idle (default)", "<=", 2.0),
    "idle_one": Goal("threads: one thread / all threads throughput, idle", "info", None),
    "busy_all": Goal("threads: all threads / one thread throughput, one core busy", "info", None),
}
SETTINGS = ("default", "one", "all")
TEXTS = [f"how do I parse the {i}th line of a csv file into a dictionary of fields"
         for i in range(256)]


def worker(setting: str, texts: list[str] = TEXTS) -> dict[str, float]:
    """Measure one setting in this process."""
    from tttembed.embed.cache import load_embedder

    threads = {"default": None, "one": 1, "all": len(os.sched_getaffinity(0))}[setting]
    emb = load_embedder("st:bundled:all-MiniLM-L6-v2", cache=False, threads=threads)
    emb.encode(texts[:8], "query")  # load and warm up (the policy's first measurement)
    time.sleep(2.2)  # let the policy re-measure under this condition
    emb.encode(texts[:8], "query")
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        emb.encode(texts, "document")
        best = min(best, time.perf_counter() - t)
    lat = []
    for i in range(30):
        t = time.perf_counter()
        emb.encode([texts[i % len(texts)]], "query")
        lat.append(time.perf_counter() - t)
    lat.sort()
    import torch

    return {"texts_per_s": len(texts) / best, "p50_ms": 1000 * lat[len(lat) // 2],
            "torch_threads": float(torch.get_num_threads())}


def run(setting: str, texts: int = len(TEXTS)) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                            "TTTEMBED_THREADS")}
    out = subprocess.run([sys.executable, __file__, "--worker", setting, "--texts",
                          str(texts)], env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def busy_core() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=SETTINGS)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--conditions", default="idle,busy", help="idle, busy or both")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="a subset of "
                    + ", ".join(SETTINGS))
    ap.add_argument("--texts", type=int, default=len(TEXTS), help="texts of the "
                    f"throughput run (at most {len(TEXTS)})")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, TEXTS[:args.texts])))
        return
    settings = [s for s in SETTINGS if s in args.settings.split(",")]
    conditions = [c for c in ("idle", "busy") if c in args.conditions.split(",")]
    got: dict[str, dict[str, dict[str, float]]] = {c: {} for c in conditions}
    for s in settings if "idle" in got else ():
        got["idle"][s] = run(s, args.texts)
    if "busy" in got:
        spinner = busy_core()
        try:
            time.sleep(0.5)
            for s in settings:
                got["busy"][s] = run(s, args.texts)
        finally:
            spinner.kill()
    for cond, rows in got.items():
        for s, r in rows.items():
            print(f"{cond:5s} {s:8s} threads {r['torch_threads']:.0f}  "
                  f"{r['texts_per_s']:8.1f} texts/s  one query p50 {r['p50_ms']:7.1f} ms")
    if args.out:
        write_json(args.out, got)
    emit(GOALS, measured(got))


def measured(got: dict[str, dict[str, dict[str, float]]]) -> dict[str, float | None]:
    """The measured values of :data:`GOALS` (None where a condition or setting was not
    run)."""
    def rate(cond: str, setting: str) -> float | None:
        row = got.get(cond, {}).get(setting)
        return None if row is None else row["texts_per_s"]

    def div(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a / b

    def ratio(cond: str) -> float | None:
        one, every = rate(cond, "one"), rate(cond, "all")
        best = None if one is None or every is None else max(one, every)
        return div(rate(cond, "default"), best)

    p50 = {c: got.get(c, {}).get("default", {}).get("p50_ms") for c in ("idle", "busy")}
    return {"idle": ratio("idle"), "busy": ratio("busy"),
            "latency": div(p50["busy"], p50["idle"]),
            "idle_one": div(rate("idle", "one"), rate("idle", "all")),
            "busy_all": div(rate("busy", "all"), rate("busy", "one"))}


if __name__ == "__main__":
    main()
