"""A FAISS search's tail while another process holds a core: FAISS's default OpenMP
threads (every CPU this process may use) against the free-core rule the index now
follows (:func:`tttembed.core.devices.use_faiss_threads`: the CPUs other processes leave
idle, at least one).

    python benchmarks/bench_faiss_threads.py [--docs 5183] [--searches 3000] [--busy 1]

A flat inner-product index of ``--docs`` random unit vectors (dimension 384: SciFact's
size); each search 1-8 random queries, top 10, a 1 ms pause after every third (a served
replica's batches); ``--busy`` processes spinning a core each the whole time. Both
settings run twice, interleaved (default, rule, default, rule); the p50 and p99 of each
setting are over both of its runs.

GOAL: the rule's p99 at most half the default's (rule p99 / default p99 <= 0.5); on a
machine with a single usable CPU both settings are one thread and the goal says n/a.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from claims import Goal, emit  # noqa: E402

GOALS = {"p99": Goal("FAISS search p99 with a core held elsewhere: free-core rule / FAISS's "
                     "default threads", "<=", 0.5, "x"),
         "p50": Goal("the same, p50", "info", None, "x")}


def timed(index: object, rng: np.random.Generator, searches: int, dim: int) -> list[float]:
    out = []
    for i in range(searches):
        q = rng.standard_normal((int(rng.integers(1, 9)), dim)).astype("float32")
        t = time.perf_counter()
        index.search(q, 10)  # type: ignore[attr-defined]
        out.append(1000 * (time.perf_counter() - t))
        if i % 3 == 0:
            time.sleep(0.001)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=5183, help="documents indexed (>= 10)")
    ap.add_argument("--searches", type=int, default=3000, help="searches per run (>= 10)")
    ap.add_argument("--busy", type=int, default=1, help="processes spinning a core each")
    args = ap.parse_args(argv)
    if args.docs < 10 or args.searches < 10 or args.busy < 0:
        ap.error("--docs and --searches must be >= 10, --busy >= 0")
    import faiss

    from tttembed.core.devices import usable_cpus, use_faiss_threads

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((args.docs, 384)).astype("float32")
    faiss.normalize_L2(docs)
    index = faiss.IndexFlatIP(384)
    index.add(docs)
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    lat: dict[str, list[float]] = {"default": [], "rule": []}
    used: dict[str, int] = {}
    try:
        time.sleep(1.0)  # the free-core measurement sees the spinners
        for name in ("default", "rule", "default", "rule"):
            if name == "default":
                faiss.omp_set_num_threads(usable_cpus())
                used[name] = usable_cpus()
            else:
                used[name] = use_faiss_threads()
            lat[name] += timed(index, rng, args.searches, 384)
    finally:
        for p in spin:
            p.kill()
    p = {k: (float(np.percentile(v, 50)), float(np.percentile(v, 99))) for k, v in lat.items()}
    for k, (p50, p99) in p.items():
        print(f"{k}: {used[k]} thread(s), p50 {p50:.3f} ms, p99 {p99:.3f} ms "
              f"({len(lat[k]):,} searches)", flush=True)
    same = used["default"] == used["rule"]
    emit(GOALS, {"p99": None if same else p["rule"][1] / p["default"][1],
                 "p50": p["rule"][0] / p["default"][0]},
         note=f"{args.docs} docs, {args.busy} busy, {usable_cpus()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
