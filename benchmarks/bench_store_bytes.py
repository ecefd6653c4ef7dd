"""What the closed loop's store and registry cost on disk: bytes per logged search, per
click event and per registry version, and a "disk per day" table for operators.

    python benchmarks/bench_store_bytes.py --data ../shared/data/scifact
        [--searches 20000] [--k 10] [--backends sqlite,postgresql] [--json OUT]

A fresh feedback store per backend (SQLite: a file; PostgreSQL: a server started on
127.0.0.1 for the run, as the soak does) logs ``--searches`` searches as a replica logs
them (the folder's real question texts in turn, ``--k`` document ids of its corpus, a
session id each, a third of them a RandPair intervention as ``--explore 0.33`` would),
and a click event on 30% of them (the soak's click share). The bytes are the store's own
count (``tttembed store stats``: SQLite's ``dbstat``, PostgreSQL's
``pg_total_relation_size``, indexes and TOAST included) after the writes, less those
before, per row. A registry version is a state file: versions of
100, 1,000 and 10,000 query-wise vectors of the index's dimension (no task vector) are registered in a
folder registry and their bytes read (``version_bytes``).

No goal: a sizing table. Retention's goal (the store's bytes stay bounded while the
loop runs) is the soak's (``bench_soak.py --retain 5m``); this script says what one
window of traffic costs, so an operator can choose ``--retain``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _support import DATA, ROOT, write_json  # noqa: E402

#: Searches per second the disk-per-day table is given for.
RATES = (1, 10, 50)
#: Query-wise vectors of the versions measured.
QUERY_ROWS = (100, 1000, 10_000)
CLICK_SHARE = 0.3


def read_texts(data: Path) -> tuple[list[str], list[str]]:
    """The folder's question texts and document ids."""
    questions, docs = [], []
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        questions = [json.loads(line)["text"] for line in fh if line.strip()]
    with open(data / "corpus.jsonl", encoding="utf-8") as fh:
        docs = [json.loads(line)["_id"] for line in fh if line.strip()]
    return questions, docs


def fill(store: Any, questions: list[str], docs: list[str], n: int, k: int
         ) -> tuple[int, int]:
    """Log ``n`` searches and click 30% of them: (searches, clicks) written."""
    import numpy as np

    from tttembed.loop.rows import Event, SearchLog

    rng = np.random.default_rng(0)
    now = time.time()
    clicks = 0
    for start in range(0, n, 500):
        rows, events = [], []
        for i in range(start, min(start + 500, n)):
            ids = tuple(docs[j] for j in rng.choice(len(docs), size=k, replace=False))
            s = SearchLog(f"{i:012x}{rng.integers(1 << 30):08x}", "task",
                          questions[i % len(questions)], now + i * 1e-3, "v7", ids, "search",
                          "host:1234", "randpair:3" if i % 3 == 0 else "",
                          session=f"session-{i}")
            rows.append(s)
            if rng.random() < CLICK_SHARE:
                events.append(Event(s.search_id, ids[0], "click", s.session, "", s.task,
                                    s.query, 1, 1, 0.0, s.created, s.created))
        store.log_searches(rows)
        clicks += store.add_events(events).stored
    return n, clicks


def measure_store(spec: str, questions: list[str], docs: list[str], n: int, k: int
                  ) -> dict[str, Any]:
    from tttembed.loop.open import open_store

    store = open_store(spec)
    try:
        before = store.stats().tables
        searches, clicks = fill(store, questions, docs, n, k)
        if hasattr(store, "vacuum"):
            store.vacuum()  # PostgreSQL: the statistics and the visibility map settled
        after = store.stats().tables
    finally:
        store.close()

    def grew(*tables: str) -> int:
        return sum((after[t].bytes or 0) - (before[t].bytes or 0) for t in tables)

    per_search = grew("searches", "interventions", "tallies") / searches
    per_click = grew("events") / max(clicks, 1)
    return {"searches": searches, "clicks": clicks, "k": k,
            "bytes_per_search": round(per_search, 1),
            "bytes_per_click": round(per_click, 1),
            "query_chars_mean": round(sum(len(q) for q in questions) / len(questions), 1)}


def measure_versions(index: Any) -> dict[str, int]:
    import numpy as np

    from tttembed.adapt.scopes import query_key
    from tttembed.adapt.state import AdaptState
    from tttembed.registry.versions import Registry

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        reg = Registry(Path(tmp) / "reg", create=True)
        rng = np.random.default_rng(0)
        for n in QUERY_ROWS:
            keys = tuple(query_key("task", f"question {i}") for i in range(n))
            vectors = rng.normal(size=(n, index["dim"])).astype(np.float32)
            st = AdaptState("query", keys, vectors, np.full(n, 0.5),
                            np.full(n, 10), identity=index["identity"],
                            dim=index["dim"], corpus_fingerprint="f", scorer="bench")
            v = reg.register(st, scope="query")
            out[str(n)] = reg.version_bytes()[v.name]
    return out


def per_day(row: dict[str, Any], rate: float) -> float:
    """Bytes a day of traffic at ``rate`` searches/s costs (30% clicked)."""
    return rate * 86400 * (row["bytes_per_search"] + CLICK_SHARE * row["bytes_per_click"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA / "scifact"), help="a BEIR folder "
                    "(queries.jsonl, corpus.jsonl): the question texts and document ids")
    ap.add_argument("--searches", type=int, default=20_000, help="searches logged per store")
    ap.add_argument("--k", type=int, default=10, help="document ids logged per search (the "
                    "served top k)")
    ap.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: "
                    "sqlite, postgresql (a server started for the run)")
    ap.add_argument("--dim", type=int, default=384, help="the index's dimension, for the "
                    "versions' state files (384: all-MiniLM-L6-v2)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    data = Path(args.data)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in backends if b not in ("sqlite", "postgresql")]
    if bad or not backends:
        print(f"error: --backends {args.backends}: give sqlite and/or postgresql",
              file=sys.stderr)
        return 2
    if not (data / "queries.jsonl").is_file() or not (data / "corpus.jsonl").is_file():
        print(f"error: --data {data}: not a BEIR folder (no queries.jsonl and corpus.jsonl)",
              file=sys.stderr)
        return 2
    if args.searches < 1 or args.k < 1:
        print("error: --searches and --k must be >= 1", file=sys.stderr)
        return 2
    questions, docs = read_texts(data)
    k = min(args.k, len(docs))
    out: dict[str, Any] = {"data": data.name, "backends": {}}
    with tempfile.TemporaryDirectory(prefix="bench-store-bytes-") as tmp:
        for backend in backends:
            if backend == "sqlite":
                spec = str(Path(tmp) / "loop.sqlite")
                out["backends"][backend] = measure_store(spec, questions, docs,
                                                         args.searches, k)
                continue
            sys.path.insert(0, str(ROOT))
            import tests.pg as pg

            with pg.postgres_instance(Path(tmp)) as db:
                out["backends"][backend] = measure_store(str(db.url), questions, docs,
                                                         args.searches, k)
    out["version_bytes_by_query_rows"] = measure_versions({"dim": args.dim,
                                                           "identity": "st:bench"})
    report(out)
    write_json(args.json, out)
    return 0


def report(out: dict[str, Any]) -> None:
    print(f"{out['data']}: bytes on disk per logged row (indexes included)")
    for backend, row in out["backends"].items():
        print(f"  {backend:<11} search {row['bytes_per_search']:>8,.0f} B  click "
              f"{row['bytes_per_click']:>6,.0f} B  (k {row['k']}, questions of "
              f"{row['query_chars_mean']:.0f} characters on average)")
    versions = out["version_bytes_by_query_rows"]
    print("  a version (state file): " + ", ".join(
        f"{int(n):,} query rows {b / 1e6:.2f} MB" for n, b in versions.items()))
    print("disk per day of traffic (30% of searches clicked):")
    for backend, row in out["backends"].items():
        print(f"  {backend:<11} " + ", ".join(
            f"{r}/s: {per_day(row, r) / 1e9:.2f} GB" for r in RATES))
    out["per_day_gb"] = {b: {str(r): round(per_day(row, r) / 1e9, 3) for r in RATES}
                         for b, row in out["backends"].items()}


if __name__ == "__main__":
    sys.exit(main())
