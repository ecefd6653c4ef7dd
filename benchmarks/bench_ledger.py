"""Reward ledger: nested budgets pay only new pairs, a SIGKILL loses no committed pair, and
the ledger's overhead per pair. One command: ``python benchmarks/bench_ledger.py``.

(a) budget B1, then a larger nested budget B2 (a prefix-extension of the same pair order),
    counting scorer: prints requested / cached / paid per run and asserts paid2 == B2 - B1.
(b) a child process scores B2 pairs with a slow scorer and is SIGKILLed mid-way; a restart
    scores the same pairs: prints pairs paid before the kill, committed, served from the
    ledger after the restart, and committed pairs lost (asserted 0).
(c) N pairs through a trivial scorer, bare vs through LedgerScorer (first pass: all paid and
    written; second pass: all served from the ledger): times and ratios from this run,
    lookup and write throughput in pairs/s.

Texts come from ../shared/data/scifact when present (``--data`` to point elsewhere), else
generated. The ledger lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _support import DATA
from claims import Goal, emit

from tttembed.score.base import Item
from tttembed.score.ledger import Ledger, LedgerScorer

GOALS = {
    "nested": Goal("ledger: pairs paid twice across nested budgets", "==", 0),
    "lost": Goal("ledger: committed pairs lost to a SIGKILL", "==", 0),
    "lookup": Goal("ledger: lookup time per pair served from the ledger", "info", None, " us"),
}
DEFAULT_DATA = DATA / "scifact"
DEPTH = 10  # candidates per query in the pair order


def reward_of(query: str, doc: str) -> float:
    h = hashlib.blake2b(f"{query}\x00{doc}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") / 2**32


class Counting:
    """A trivial scorer (a hash of the pair) that counts what it is asked."""

    mapping = "fake"

    def __init__(self, spec: str = "bench:counting", delay: float = 0.0,
                 log: Path | None = None) -> None:
        self.spec, self.delay, self.log = spec, delay, log
        self.asked = 0

    def score(self, query: Item, docs: list[Item]) -> np.ndarray:
        self.asked += len(docs)
        if self.log is not None:
            with open(self.log, "a") as f:  # recorded as paid before the work is done
                f.write("".join(f"{query.id}\t{d.id}\n" for d in docs))
        if self.delay:
            time.sleep(self.delay)
        return np.array([reward_of(query.text, d.text) for d in docs], dtype=np.float64)


def load_texts(data: Path, n_queries: int) -> tuple[list[Item], list[Item], str]:
    rng = random.Random(0)
    if (data / "queries.jsonl").exists() and (data / "corpus.jsonl").exists():
        with open(data / "queries.jsonl", encoding="utf-8") as f:
            queries = [Item(str(o["_id"]), o["text"]) for o in map(json.loads, f)]
        with open(data / "corpus.jsonl", encoding="utf-8") as f:
            docs = [Item(str(o["_id"]), f"{o.get('title', '')} {o.get('text', '')}".strip())
                    for o in map(json.loads, f)]
        rng.shuffle(queries)
        return queries[:n_queries], docs, f"SciFact texts from {data}"
    words = ["tide", "moon", "ocean", "gravity", "plant", "light", "cell", "gene", "protein",
             "energy", "water"]
    queries = [Item(f"q{i}", " ".join(rng.choices(words, k=8))) for i in range(n_queries)]
    # the documents do not depend on how many queries were drawn: the child process of
    # (b) draws fewer queries than the parent and must see the same pairs
    drng = random.Random(1)
    docs = [Item(f"d{i}", " ".join(drng.choices(words, k=120))) for i in range(5000)]
    return queries, docs, "generated texts"


def pair_order(queries: list[Item], docs: list[Item]) -> list[tuple[Item, Item]]:
    """Each query's first DEPTH candidates (a fixed random draw), query after query."""
    rng = random.Random(1)
    return [(q, d) for q in queries for d in rng.sample(docs, DEPTH)]


def score_pairs(scorer, pairs: list[tuple[Item, Item]]) -> np.ndarray:
    """Score pairs grouped by query, in order."""
    out: list[float] = []
    i = 0
    while i < len(pairs):
        q = pairs[i][0]
        j = i
        while j < len(pairs) and pairs[j][0] is q:
            j += 1
        out.extend(scorer.score(q, [d for _, d in pairs[i:j]]).tolist())
        i = j
    return np.array(out)


def child(args: argparse.Namespace) -> None:
    queries, docs, _ = load_texts(Path(args.data), args.b2 // DEPTH)
    pairs = pair_order(queries, docs)[: args.b2]
    scorer = LedgerScorer(Counting("bench:slow", delay=args.delay, log=Path(args.log)),
                          Ledger(args.db), chunk_size=args.chunk)
    score_pairs(scorer, pairs)


def count_rows(db: Path) -> int:
    import sqlite3
    from contextlib import closing

    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as raw:
            return int(raw.execute("SELECT COUNT(*) FROM rewards").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--b1", type=int, default=500)
    ap.add_argument("--b2", type=int, default=1500)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--n", type=int, default=10000, help="pairs for the overhead test")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--delay", type=float, default=0.02, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.b1 % DEPTH or args.b2 % DEPTH or not 0 < args.b1 < args.b2:
        ap.error("need 0 < b1 < b2, both multiples of 10")

    queries, docs, source = load_texts(Path(args.data), max(args.b2, args.n) // DEPTH)
    print(f"texts: {source}; {len(queries)} queries, {len(docs)} documents; "
          f"chunk_size={args.chunk}")
    order = pair_order(queries, docs)
    with tempfile.TemporaryDirectory(prefix="bench_ledger_") as folder:
        run(args, order, Path(folder))


def run(args: argparse.Namespace, order: list[tuple[Item, Item]], tmp: Path) -> None:

    # (a) nested budgets ---------------------------------------------------------------
    db = tmp / "a.sqlite"
    runs = []
    for budget in (args.b1, args.b2):
        inner = Counting()
        scorer = LedgerScorer(inner, Ledger(db), chunk_size=args.chunk)  # a fresh "process"
        rewards = score_pairs(scorer, order[:budget])
        assert inner.asked == scorer.paid
        runs.append((budget, scorer.counts(), rewards))
    print("\n(a) nested budgets")
    print(f"{'budget':>8} {'requested':>10} {'cached':>8} {'paid':>8} {'missing':>8}")
    for budget, c, _ in runs:
        print(f"{budget:>8} {c.requested:>10} {c.cached:>8} {c.paid:>8} {c.missing:>8}")
    (b1, c1, r1), (b2, c2, r2) = runs
    assert c2.paid == b2 - b1 and c2.cached == b1, (c2, b1, b2)
    assert np.array_equal(r1, r2[:b1])
    print(f"paid2 == B2 - B1 == {b2 - b1}: ok; total paid {c1.paid + c2.paid} for {b2} pairs")
    emit(GOALS, {"nested": c1.paid + c2.paid - b2})

    # (b) SIGKILL mid-scoring and restart -------------------------------------------------
    db, log = tmp / "b.sqlite", tmp / "paid.log"
    cmd = [sys.executable, __file__, "--child", "--data", args.data, "--b2", str(args.b2),
           "--chunk", str(args.chunk), "--db", str(db), "--log", str(log),
           "--delay", str(args.delay)]
    proc = subprocess.Popen(cmd)
    target = args.b2 // 3
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and count_rows(db) < target:
        time.sleep(0.01)
    assert proc.poll() is None, "child finished before the kill; raise --delay"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = count_rows(db)
    paid_before = len(log.read_text().splitlines())
    ledger = Ledger(db)
    served_before = {}
    pairs = order[: args.b2]
    for q in {q.id: q for q, _ in pairs}.values():
        served_before[q.id] = set(ledger.get_many(
            "bench:slow", q.text, [d.text for qq, d in pairs if qq is q]))
    inner = Counting("bench:slow", log=log)
    scorer = LedgerScorer(inner, ledger, chunk_size=args.chunk)
    t0 = time.perf_counter()
    rewards = score_pairs(scorer, pairs)
    restart_s = time.perf_counter() - t0
    assert np.array_equal(rewards, [reward_of(q.text, d.text) for q, d in pairs])
    lines = [tuple(x.split("\t")) for x in log.read_text().splitlines()]
    repaid = lines[paid_before:]
    by_id = {(q.id, d.id): (q, d) for q, d in pairs}
    lost_committed = sum(
        1 for key in repaid
        if hashlib.sha256(by_id[key][1].text.encode()).hexdigest() in served_before[key[0]])
    print("\n(b) SIGKILL mid-scoring, then restart")
    print(f"paid before the kill: {paid_before}; committed before the kill: {committed}")
    print(f"after restart: served from the ledger {scorer.cached}, paid {scorer.paid} "
          f"({restart_s:.2f} s)")
    print(f"in flight at the kill (paid twice): {paid_before - committed}; "
          f"committed pairs lost: {lost_committed}")
    print(f"total paid across both runs: {len(lines)} for {len(pairs)} distinct pairs")
    emit(GOALS, {"lost": lost_committed})
    assert lost_committed == 0 and scorer.cached == committed
    assert len(lines) == len(pairs) + (paid_before - committed)
    assert 0 <= paid_before - committed <= args.chunk
    ledger.close()

    # (c) overhead ------------------------------------------------------------------------
    pairs = order[: args.n]
    bare = Counting()
    t0 = time.perf_counter()
    base = score_pairs(bare, pairs)
    t_bare = time.perf_counter() - t0
    ledger = Ledger(tmp / "c.sqlite")
    wrapped = LedgerScorer(Counting(), ledger, chunk_size=args.chunk)
    t0 = time.perf_counter()
    first = score_pairs(wrapped, pairs)
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = score_pairs(wrapped, pairs)
    t_read = time.perf_counter() - t0
    assert np.array_equal(base, first) and np.array_equal(base, second)
    assert wrapped.paid == len(pairs) and wrapped.cached == len(pairs)
    n = len(pairs)
    print(f"\n(c) overhead, {n} pairs in {n // DEPTH} queries of {DEPTH}, trivial scorer")
    print(f"bare scorer:               {t_bare:8.3f} s  ({n / t_bare:12,.0f} pairs/s)")
    print(f"ledger, all paid+written:  {t_write:8.3f} s  ({n / t_write:12,.0f} pairs/s)  "
          f"x{t_write / t_bare:.1f} of bare, +{(t_write - t_bare) / n * 1e6:.1f} us/pair")
    print(f"ledger, all from ledger:   {t_read:8.3f} s  ({n / t_read:12,.0f} pairs/s)  "
          f"x{t_read / t_bare:.1f} of bare, {t_read / n * 1e6:.1f} us/pair lookup")
    emit(GOALS, {"lookup": t_read / n * 1e6})
    ledger.close()  # the last connection checkpoints the WAL into the file
    size = sum(p.stat().st_size for p in tmp.glob("c.sqlite*"))
    print(f"ledger file after close: {size / n:.0f} bytes/pair")


if __name__ == "__main__":
    main()
