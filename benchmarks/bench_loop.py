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

from _support import DATA, proc_status  # noqa: E402
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
    from tttembed.loop.run import Loop
    from tttembed.loop.store import SearchLog, open_store

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
        for table in ("searches", "feedback", "rewards", "spend"):
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
    ap.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store", default="sqlite", help=argparse.SUPPRESS)
    ap.add_argument("--store-url", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
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
