"""What one ``GET /v1/loop`` costs the feedback store as traffic accumulates: the store
reads behind it (``counts``, the click-through by rank, the clicks waiting), timed on a
real PostgreSQL store after each step of logged searches (ten results each, a click on
one in five), and the cost per read at the largest size over the smallest, measured in
the same run. The fill logs in seconds what traffic logs in an hour, so the planner's
statistics are refreshed after each step (``ANALYZE``), as autovacuum does in traffic
(without it PostgreSQL scans the table for the searches of the last minute).

Goal: a status read that does not grow with the traffic kept (largest / smallest <= 2x):
a dashboard or a monitor polling ``/v1/loop`` must not load the database more each hour
(the soak polls it every second on each replica).

    python benchmarks/bench_status_cost.py
    python benchmarks/bench_status_cost.py --steps 10000,100000,300000 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import ROOT
from claims import Goal, emit

#: Searches a second the fill is stamped at (the soak's replicas serve about this many).
RATE = 100.0
GOALS = {
    "growth": Goal("GET /v1/loop store reads: cost at the largest store / the smallest",
                   "<=", 2.0, "x"),
}


def _fill(store: Any, n: int, rng: random.Random) -> None:
    """Log ``n`` searches (and a click on one in five), in batches, stamped as a stream
    of ``RATE`` searches a second that ends now (so the searches still settling, those of
    the last minute, are the last minute's traffic, not the whole fill)."""
    from tttembed.loop.rows import Event, SearchLog

    end = time.time()
    for at in range(0, n, 2000):
        rows = [SearchLog(uuid.uuid4().hex, "bench", f"question {rng.randrange(800)}",
                          end - (n - at - i) / RATE,
                          f"v{rng.randrange(40)}",
                          tuple(f"d{rng.randrange(5000)}" for _ in range(10)))
                for i in range(min(2000, n - at))]
        store.log_searches(rows)
        store.add_events([Event(r.search_id, r.ids[0], "click", session="s", rank=1)
                          for r in rows[::5]])


def _reads(store: Any) -> dict[str, Callable[[], Any]]:
    from tttembed.loop.status import clicks_waiting
    from tttembed.serve.events import click_status

    return {"counts": store.counts, "clicks": lambda: click_status(store),
            "waiting": lambda: clicks_waiting(store, 60.0)}


def measure(steps: list[int], repeats: int) -> dict[int, dict[str, float]]:
    """Per store size: the median seconds of each read."""
    sys.path.insert(0, str(ROOT))
    from tests.pg import postgres_instance
    from tttembed.loop.open import open_store

    out: dict[int, dict[str, float]] = {}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp, \
            postgres_instance(Path(tmp)) as db:
        store = open_store(db.url)
        try:
            total = 0
            for size in steps:
                _fill(store, size - total, rng)
                total = size
                with store._tx() as cur:  # noqa: SLF001  (what autovacuum does in traffic)
                    cur.execute("ANALYZE")
                times: dict[str, list[float]] = {}
                for _ in range(repeats):
                    for name, read in _reads(store).items():
                        t0 = time.perf_counter()
                        read()
                        times.setdefault(name, []).append(time.perf_counter() - t0)
                out[size] = {k: statistics.median(v) for k, v in times.items()}
        finally:
            store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="10000,50000,100000,200000,300000",
                    help="Store sizes (searches logged, ascending, comma-separated).")
    ap.add_argument("--repeats", type=int, default=3, help="Reads per size (medians).")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",") if s.strip()]
    if not steps or steps != sorted(steps) or steps[0] < 1 or args.repeats < 1:
        print("error: --steps: give ascending positive sizes, e.g. 10000,100000; "
              "--repeats 1 or more", file=sys.stderr)
        return 2
    got = measure(steps, args.repeats)
    for size, t in got.items():
        print(f"{size:>8} searches: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())
              + f"; all {sum(t.values()) * 1e3:.1f} ms")
    first, last = sum(got[steps[0]].values()), sum(got[steps[-1]].values())
    emit(GOALS, {"growth": last / first if first > 0 else None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
