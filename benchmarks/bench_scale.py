"""Scaling past one process: (a) rerank scoring throughput vs requests in flight,
(b) the Ray executor vs the local one for corpus embedding.

(a) A ``rerank:`` scorer against the loopback rerank server of ``tests/servers.py`` with
``--latency`` seconds (default 0.05) added to every answer: one query's ``--requests x
--docs`` candidates, ``--docs`` per request, scored at each ``--concurrency`` level.
Speed-up = time at 1 in flight / time at c; ideal = min(c, requests). Goal: >= 0.8 x ideal
up to 16 in flight.

(b) ``--abstracts`` (default 5,000) SciFact abstracts (title + text, from
``$TTTEMBED_DATA/scifact`` or ``--scifact``) embedded by the bundled MiniLM on CPU, batches
of ``--batch``, each run into a fresh embedding cache: the local executor (this process,
torch on every CPU), then ``ray.init(num_cpus=--ray-cpus)`` (timed apart: once per
process, a cluster is already up) and each ``--ray-configs`` entry ``ACTORSxCPUS`` (actors
of that many CPUs each), then a rerun that finds everything cached (``--local-last``: the
local run after the ray ones). Overhead = ray seconds
(actor start and model loads included) / local seconds. Goal: <= 1.3 x at 2 CPUs.

    python benchmarks/bench_scale.py [--part a|b|ab] [--requests 128] [--docs 10]
        [--latency 0.05] [--abstracts 5000] [--batch 64] [--ray-configs 1x2,2x1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _support import DATA, loopback_servers
from claims import Goal, emit

GOALS = {
    "eff4": Goal("rerank scoring: speed-up at 4 in flight / ideal", ">=", 0.8),
    "eff16": Goal("rerank scoring: speed-up at 16 in flight / ideal", ">=", 0.8),
    "eff64": Goal("rerank scoring: speed-up at 64 in flight / ideal", "info", None),
    "pairs_s": Goal("rerank scoring: pairs per second at 16 in flight", "info", None, " /s"),
    "ray_overhead": Goal("ray vs local embedding at 2 CPUs: best ray seconds / local "
                         "seconds", "<=", 1.3),
    "ray_init_s": Goal("ray.init on this machine", "info", None, " s"),
    "ray_max_diff": Goal("ray vs local vectors: max abs difference", "<=", 1e-5),
}
SPEC = "st:bundled:all-MiniLM-L6-v2"


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


def part_a(args: argparse.Namespace) -> None:
    LocalOpenAIServer = loopback_servers().LocalOpenAIServer
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


def _abstracts(folder: Path, n: int) -> list[str]:
    from tttembed.data.beir import doc_text, load_corpus

    corpus = load_corpus(folder / "corpus.jsonl")
    return [doc_text(d) for d in list(corpus.values())[:n]]


def _timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def part_b(args: argparse.Namespace) -> None:
    import numpy as np
    import ray

    from tttembed.execute import EmbedStats, Ray, embed_texts

    os.environ.setdefault("TTTEMBED_DEVICE", "cpu")
    texts = _abstracts(args.scifact, args.abstracts)
    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    rows: list[tuple[str, float, float | None]] = []

    def run_local() -> tuple[np.ndarray, float]:
        return _timed(embed_texts, SPEC, texts, batch_size=args.batch, cache_dir=tmp / "local")

    if not args.local_last:
        local, t_local = run_local()
    _, t_init = _timed(ray.init, num_cpus=args.ray_cpus, include_dashboard=False,
                       log_to_driver=False)
    rows.append((f"ray.init(num_cpus={args.ray_cpus}), once per process", t_init, None))
    runs = []
    for cfg in args.ray_configs.split(","):
        actors, cpus = (int(x) for x in cfg.split("x"))
        cache = tmp / f"ray{cfg}"
        got, took = _timed(embed_texts, SPEC, texts, executor=Ray(actors=actors),
                           batch_size=args.batch, num_cpus=cpus, cache_dir=cache)
        runs.append((f"ray, {actors} actor(s) x {cpus} CPU(s)", got, took))
    if args.local_last:
        local, t_local = run_local()
    rows.insert(0, (f"local executor (torch on {os.cpu_count()} threads)", t_local, 1.0))
    rows += [(name, took, took / t_local) for name, _, took in runs]
    diffs = [float(np.abs(got - local).max()) for _, got, _ in runs]
    ratios = [took / t_local for _, _, took in runs]
    stats = EmbedStats()
    _, t_again = _timed(embed_texts, SPEC, texts, executor="ray", batch_size=args.batch,
                        cache_dir=cache, stats=stats)
    assert stats.embedded == 0
    rows.append(("ray rerun (everything cached)", t_again, None))
    ray.shutdown()
    print(f"{len(texts)} SciFact abstracts, {SPEC} on CPU, batch {args.batch}")
    print(f"{'run':<44} {'seconds':>8} {'vs local':>8}")
    for name, sec, ratio in rows:
        print(f"{name:<44} {sec:>8.2f} {'' if ratio is None else f'{ratio:.2f}':>8}")
    emit(GOALS, {"ray_overhead": min(ratios), "ray_init_s": t_init,
                 "ray_max_diff": max(diffs)})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="ab", help="a, b or ab")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--docs", type=int, default=10, help="documents per request")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds added per answer")
    ap.add_argument("--levels", default="1,4,16,64")
    data = Path(os.environ.get("TTTEMBED_DATA", DATA)) / "scifact"
    ap.add_argument("--scifact", type=Path, default=data)
    ap.add_argument("--abstracts", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--ray-configs", default="1x2,2x1", help="ACTORSxCPUS, comma-separated")
    ap.add_argument("--local-last", action="store_true", help="run the local executor after "
                    "the ray runs (order effects on a shared machine)")
    args = ap.parse_args()
    if "a" in args.part:
        part_a(args)
    if "b" in args.part:
        part_b(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
