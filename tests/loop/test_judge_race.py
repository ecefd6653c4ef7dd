"""Two learners judging the same pairs at the same moment pay each pair once: ``serve
--learn --chain`` runs the state learner and the chain learner on one store and ledger,
and the same question sent to /v1/search and /v1/chain/search puts the same (question,
passage) pairs in both learners' queues, under two tasks. Each pays through
:meth:`BackgroundJudge.pay`; the reservation claims a pair by its texts in the
transaction that reserves the budget, so the learner that comes second skips it (its
reward is in the ledger for its next call) instead of asking the judge again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.pg import new_database

ROOT = Path(__file__).resolve().parents[2]
DOCS = {f"d{i}": f"passage number {i} about topic {i % 3}" for i in range(6)}
QUERIES = ["what is topic zero", "which passage is number one"]
#: seconds the stand-in judge takes per call: both processes are inside pay at once
SLOW_S = 0.4


class Counting:
    """A judge that writes every (query, passage) it is asked to a file, slowly."""

    spec = identity = "counting"
    mapping = ""

    def __init__(self, log: str) -> None:
        self.log = log

    def score(self, query, docs):  # noqa: ANN001, ANN201
        with open(self.log, "a", encoding="utf-8") as f:  # one write per line: O_APPEND
            for d in docs:
                f.write(json.dumps([query.text, d.text]) + "\n")
        time.sleep(SLOW_S)
        return np.full(len(docs), 0.5)


def worker(spec: str, ledger: str, log: str, task: str, gate: str, out: str) -> None:
    """One learner: say it is ready in ``gate``, wait for the other one, pay every pair under ``task``, then pay them again
    until every reward is back (the pairs the other learner claimed come from the ledger
    once it paid them, paying nothing)."""
    from tttembed.loop.judge import BackgroundJudge
    from tttembed.loop.open import open_store
    from tttembed.score.ledger import Ledger, LedgerScorer

    corpus = {d: {"title": "", "text": t} for d, t in DOCS.items()}
    store = open_store(spec)
    judge = BackgroundJudge(LedgerScorer(Counting(log), Ledger(ledger)), corpus, store,
                            budget=100)
    pairs = [(task, q, d) for q in QUERIES for d in DOCS]
    (Path(gate) / task.strip("/")).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(gate).iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    first, paid = judge.pay(pairs)
    again, paid_again, deadline = first, 0, time.monotonic() + 60
    while len(again) < len(pairs) and time.monotonic() < deadline:  # the other learner's
        time.sleep(0.05)                                            # pairs, once paid
        again, more = judge.pay(pairs)
        paid_again += more
    store.close()
    Path(out).write_text(json.dumps({"paid": paid, "paid_again": paid_again,
                                     "first": len(first), "again": len(again)}))


@pytest.fixture(params=["sqlite", "postgresql"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "loop.sqlite")
    return new_database(request.getfixturevalue("pg_url"), "j" + uuid.uuid4().hex[:16])


def test_two_learners_judging_the_same_pairs_at_once_pay_each_once(spec, tmp_path):
    """A state learner (task "t") and a chain learner (task "/chain") pay the same
    (question, passage) texts at the same moment, two processes on one store and one
    ledger: the judge is asked each pair once, the ledger holds each once, and the
    budget's spend is what the ledger paid."""
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import CHAIN_TASK
    from tttembed.score.ledger import Ledger

    open_store(spec).close()  # the schema made before the race
    ledger, log = str(tmp_path / "ledger.sqlite"), str(tmp_path / "asked.jsonl")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    gate = tmp_path / "gate"  # both started (imports done) before the race begins
    gate.mkdir()
    procs = []
    for task in ("t", CHAIN_TASK):
        out = str(tmp_path / f"{task.strip('/')}.json")
        code = ("import sys; from tests.loop.test_judge_race import worker; "
                "worker(*sys.argv[1:7])")
        procs.append((subprocess.Popen(
            [sys.executable, "-c", code, spec, ledger, log, task, str(gate), out],
            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True), out))
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(Path(out).read_text()))
    asked = [tuple(json.loads(line)) for line in Path(log).read_text().splitlines()]
    n = len(QUERIES) * len(DOCS)
    assert len(asked) == n == len(set(asked)), f"pairs asked twice: {len(asked)} of {n}"
    assert Ledger(ledger).count() == n
    assert sum(r["paid"] for r in results) == n, results
    assert all(r["paid_again"] == 0 and r["again"] == n for r in results), results
    store = open_store(spec)
    try:
        assert sum(store.spent().values()) == n
        assert sum(r.paid for r in store.rewards()) == n
        assert store.prepaid([("t", q, d) for q in QUERIES for d in DOCS]) == set()
    finally:
        store.close()


def test_a_claim_a_kill_left_is_released_at_the_next_start_and_paid_once(spec):
    """A learner killed mid-pay leaves its claims: the other learner skips those pairs
    (never asks them while the claim stands), and the next start's recover() releases
    them with the reservation: the pair never sent and the pair whose answer was lost
    are claimed again, the lost one not charged again; the answered one is in the
    ledger (read, not paid)."""
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import CHAIN_TASK

    store = open_store(spec)
    try:
        pairs = [("t", "q", f"d{i}") for i in range(3)]
        keys = [f"k{i}" for i in range(3)]  # the judge's and the texts' key
        got = store.claim("judge", 10, pairs, keys)
        assert got is not None and got.mine == pairs and sum(store.spent().values()) == 3
        store.mark_sent(pairs[:2])  # d0 answered (the ledger holds it), d1's answer lost
        chain = [(CHAIN_TASK, q, d) for _, q, d in pairs]  # the same texts, another task
        other = store.claim("judge", 10, chain, keys)
        assert other is not None and other.mine == [] and other.taken == chain
        assert sum(store.spent().values()) == 3  # nothing charged for what it skipped
        assert store.recover(lambda t: t[2] == "d0") == {"given_back": 1, "spent": 1,
                                                         "lost": 1}
        again = store.claim("judge", 10, pairs, keys, prepaid=store.prepaid(pairs),
                            new=lambda ps: [p[2] != "d0" for p in ps])
        assert again is not None and again.mine == pairs[1:] and again.held == pairs[:1]
        assert sum(store.spent().values()) == 3  # d2 given back and charged again; d1 kept
        late = store.claim("judge", 10, chain, keys, new=lambda ps: [p[2] != "d0" for p in ps])
        assert late is not None and late.mine == [] and late.taken == chain[1:]
        store.settle(pairs[1:])
        free = store.claim("judge", 10, chain[:1], keys[:1])
        assert free is not None and free.mine == chain[:1]
        store.unclaim(chain[:1])  # a failed call frees its claim
        assert store.claim("judge", 3, chain[:1], keys[:1]) is None  # the budget is spent
    finally:
        store.close()


def test_recover_keeps_the_claims_of_a_learner_that_still_runs(spec, monkeypatch):
    """The other learner starting (its recover()) leaves the claims and the reservations
    of a learner of this host that still runs: it is paying them (given back, the spend
    would fall behind what it pays); once that process is gone they are released."""
    from tttembed.core.locks import process_name
    from tttembed.loop import spend
    from tttembed.loop.open import open_store

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    store = open_store(spec)
    try:
        pair = [("t", "q", "d0")]
        monkeypatch.setattr(spend, "process_name", lambda: process_name(other.pid))
        assert store.claim("judge", 10, pair, ["k0"]).mine == pair  # type: ignore[union-attr]
        monkeypatch.undo()
        assert store.recover(lambda t: False) == {"given_back": 0, "spent": 0, "lost": 0}
        assert sum(store.spent().values()) == 1  # its reservation is not given back either
        assert store.claim("judge", 10, pair, ["k0"]).taken == pair  # type: ignore[union-attr]
        other.kill()
        other.wait()
        store.recover(lambda t: False)
        assert store.claim("judge", 10, pair, ["k0"]).mine == pair  # type: ignore[union-attr]
    finally:
        other.kill()
        other.wait()
        store.close()
