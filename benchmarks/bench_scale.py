"""Scaling past one process: (a) rerank scoring throughput vs requests in flight.

(a) A ``rerank:`` scorer against the loopback rerank server of ``tests/servers.py`` with
``--latency`` seconds (default 0.05) added to every answer: one query's ``--requests x
--docs`` candidates, ``--docs`` per request, scored at each ``--concurrency`` level.
Speed-up = time at 1 in flight / time at c; ideal = min(c, requests). Goal: >= 0.8 x ideal
up to 16 in flight. Part (b) (Ray vs local executor) is not written yet: see
docs/scaling.md.

    python benchmarks/bench_scale.py [--requests 128] [--docs 10] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from claims import Goal, emit

ROOT = Path(__file__).resolve().parents[1]
GOALS = {
    "eff4": Goal("rerank scoring: speed-up at 4 in flight / ideal", ">=", 0.8),
    "eff16": Goal("rerank scoring: speed-up at 16 in flight / ideal", ">=", 0.8),
    "eff64": Goal("rerank scoring: speed-up at 64 in flight / ideal", "info", None),
    "pairs_s": Goal("rerank scoring: pairs per second at 16 in flight", "info", None, " /s"),
}


def run(server_url: str, n_requests: int, docs: int, concurrency: int) -> float:
    """Seconds to score one query's ``n_requests x docs`` candidates."""
    from tttembed.score.base import Item
    from tttembed.score.rerank import RerankScorer

    cands = [Item(f"d{i}", f"document {i} about topic {i % 7}") for i in range(n_requests * docs)]
    with RerankScorer("bench", server_url, api="cohere", max_documents_per_request=docs,
                      max_concurrency=concurrency) as sc:
        start = time.perf_counter()
        out = sc.score(Item("q", "topic 3 document"), cands)
        took = time.perf_counter() - start
        assert sc.calls == n_requests and len(out) == len(cands)
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--docs", type=int, default=10, help="documents per request")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds added per answer")
    ap.add_argument("--levels", default="1,4,16,64")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.servers import LocalOpenAIServer

    levels = [int(x) for x in args.levels.split(",")]
    times: dict[int, float] = {}
    with LocalOpenAIServer(latency=args.latency) as srv:
        run(srv.url, 4, args.docs, 4)  # warm-up: imports, first connections
        for c in levels:
            times[c] = run(srv.url, args.requests, args.docs, c)
            srv.max_in_flight = 0
    base = times[levels[0]]
    print(f"{args.requests} requests x {args.docs} documents, {args.latency * 1000:g} ms "
          "latency per request")
    print(f"{'in flight':>9} {'seconds':>8} {'pairs/s':>8} {'speed-up':>8} {'ideal':>6} "
          f"{'/ideal':>6}")
    eff: dict[int, float] = {}
    for c in levels:
        ideal = min(c, args.requests) / min(levels[0], args.requests)
        speed = base / times[c]
        eff[c] = speed / ideal
        print(f"{c:>9} {times[c]:>8.2f} {args.requests * args.docs / times[c]:>8.0f} "
              f"{speed:>8.2f} {ideal:>6.0f} {eff[c]:>6.2f}")
    emit(GOALS, {"eff4": eff.get(4), "eff16": eff.get(16), "eff64": eff.get(64),
                 "pairs_s": args.requests * args.docs / times[16] if 16 in times else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
