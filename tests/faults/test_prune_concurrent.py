"""Two pruners at once, a learner reading while they prune, and a forget while a replica
logs: real processes on one store, on SQLite and PostgreSQL (issue 76)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.faults.conftest import ROOT, env
from tests.loop.conftest import pg_url, spec  # noqa: F401  (fixtures)
from tttembed.loop.open import open_store
from tttembed.loop.rows import SearchLog

_PRUNER = """
import json, sys, time
from tttembed.loop.open import open_store
store = open_store(sys.argv[1])
cutoff, total, skipped = float(sys.argv[2]), {}, 0
while True:
    r = store.prune(cutoff, batch=37, max_batches=3)
    skipped += r.skipped
    for k, v in r.rows.items():
        total[k] = total.get(k, 0) + v
    if not r.total and not r.skipped:
        break
print(json.dumps({"rows": total, "skipped": skipped}))
"""

_READER = """
import sys, time
from tttembed.loop.open import open_store
from tttembed.loop.pending import Tail
store = open_store(sys.argv[1])
tail = Tail(store.searches_after, lambda s: (s.created, s.search_id), lookback_s=0.0)
end = time.monotonic() + float(sys.argv[2])
reads = 0
while time.monotonic() < end:
    for page in tail.pages():
        reads += len(page)
    store.counts(); store.stats()
print(reads)
"""


def _fill(spec_: str, old: int, new: int) -> float:
    store = open_store(spec_)
    now = time.time()
    rows = [SearchLog(f"o{i:05d}", "t", f"q{i % 50}", now - 10_000 + i * 0.01, None,
                      ("a", "b"), intervention="randpair:1" if i % 3 == 0 else "")
            for i in range(old)]
    rows += [SearchLog(f"n{i:05d}", "t", f"q{i % 50}", now - 5 + i * 0.001, None, ("a",))
             for i in range(new)]
    for i in range(0, len(rows), 500):
        store.log_searches(rows[i:i + 500])
    store.close()
    return now - 1000


def test_two_pruners_at_once_delete_each_old_row_once_while_a_learner_reads(spec):  # noqa: F811
    """Two processes prune the same store at once while a third tails it as the learner
    does: every old row is deleted exactly once between them (their counts add up to
    the rows that were old, the store's pruned tallies say the same), no new row is
    touched, and the reader never fails."""
    cutoff = _fill(spec, 3000, 200)
    reader = subprocess.Popen([sys.executable, "-c", _READER, spec, "6"], cwd=ROOT,
                              env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    pruners = [subprocess.Popen([sys.executable, "-c", _PRUNER, spec, str(cutoff)], cwd=ROOT,
                                env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in pruners]
    for p, (_, err) in zip(pruners, outs):
        assert p.returncode == 0, err
    read_out, read_err = reader.communicate(timeout=300)
    assert reader.returncode == 0, read_err
    assert int(read_out.strip()) >= 200
    done = [json.loads(out) for out, _ in outs]
    searches = sum(d["rows"].get("searches", 0) for d in done)
    interventions = sum(d["rows"].get("interventions", 0) for d in done)
    assert searches == 3000 and interventions == 1000
    store = open_store(spec)
    try:
        assert store.pruned() == {"searches": 3000, "interventions": 1000}
        kept = store.searches()
        assert len(kept) == 200 and all(s.search_id.startswith("n") for s in kept)
        assert store.counts()["searches"] == 3200  # every search ever logged, still counted
    finally:
        store.close()


_LOGGER = """
import sys, time, uuid
from tttembed.loop.open import open_store
from tttembed.loop.rows import SearchLog
store = open_store(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    store.log_searches([SearchLog("b" + uuid.uuid4().hex, "t", "q", time.time(), None, ("a",),
                                  session="bob")])
    n += 1
print(n)
"""


def test_forget_while_a_replica_logs_keeps_every_other_users_search(spec):  # noqa: F811
    """A forget of one session runs while another process logs a second session's
    searches: the first session's searches are all gone, not one of the second's is
    lost, and logged = kept + forgotten."""
    store = open_store(spec)
    store.log_searches([SearchLog(f"a{i}", "t", f"mine {i}", time.time(), None, ("a",),
                                  session="alice") for i in range(300)])
    logger = subprocess.Popen([sys.executable, "-c", _LOGGER, spec, "3"], cwd=ROOT, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    report = store.forget(session="alice")
    out, err = logger.communicate(timeout=120)
    assert logger.returncode == 0, err
    logged = int(out.strip())
    try:
        assert report.searches == 300
        left = store.searches()
        assert all(s.search_id.startswith("b") for s in left)
        assert len(left) == logged
        assert store.counts()["searches"] == logged + 300
        assert store.stats().forgotten == {"searches": 300}
    finally:
        store.close()
