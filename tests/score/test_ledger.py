"""The reward ledger and LedgerScorer, with counting fake scorers (plumbing only)."""

from __future__ import annotations

import hashlib
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from tttembed.core.errors import BackendError, ConfigError, StateMismatch
from tttembed.core.io import text_hash
from tttembed.score.base import Item, Scorer
from tttembed.score.ledger import (
    Ledger,
    LedgerCounts,
    LedgerScorer,
    default_ledger_path,
)


def reward_of(query: str, doc: str) -> float:
    """A deterministic fake reward in [0, 1) from the pair's texts."""
    h = hashlib.sha256(f"{query}\x00{doc}".encode()).digest()
    return int.from_bytes(h[:4], "big") / 2**32


class Counting:
    """Fake scorer that records every pair it is asked to score."""

    mapping = "fake"

    def __init__(self, spec: str = "fake:counting", nan_for: frozenset[str] = frozenset()):
        self.spec = spec
        self.nan_for = nan_for
        self.asked: list[tuple[str, str]] = []
        self.calls = 0

    def score(self, query, docs):
        self.calls += 1
        self.asked += [(query.text, d.text) for d in docs]
        return np.array([math.nan if d.text in self.nan_for else reward_of(query.text, d.text)
                         for d in docs], dtype=np.float64)


def items(prefix: str, n: int) -> list[Item]:
    return [Item(f"{prefix}{i}", f"document {prefix} number {i}") for i in range(n)]


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def test_default_path_follows_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "c"))
    assert default_ledger_path() == tmp_path / "c" / "ledger.sqlite"
    led = Ledger()
    assert led.path == tmp_path / "c" / "ledger.sqlite" and led.path.exists()
    led.close()
    assert default_ledger_path(tmp_path / "flag") == tmp_path / "flag" / "ledger.sqlite"
    monkeypatch.delenv("TTTEMBED_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_ledger_path() == tmp_path / "xdg" / "tttembed" / "ledger.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ledger_path() == tmp_path / "home" / ".cache" / "tttembed" / "ledger.sqlite"


def test_get_many_put_many_and_wal(ledger):
    ledger.put_many("s", "query", ["a", "b", "c"], [0.25, math.nan, 1.0])
    got = ledger.get_many("s", "query", ["a", "b", "c", "d"])
    assert set(got) == {text_hash("a"), text_hash("b"), text_hash("c")}
    assert got[text_hash("a")] == 0.25 and math.isnan(got[text_hash("b")])
    assert ledger.get_many("other-spec", "query", ["a"]) == {}
    assert ledger.get_many("s", "another query", ["a"]) == {}
    assert ledger.count() == 3 and ledger.count("s") == 3 and ledger.count("x") == 0
    with closing(sqlite3.connect(ledger.path)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        nulls = raw.execute("SELECT COUNT(*) FROM rewards WHERE reward IS NULL").fetchone()[0]
        assert nulls == 1
    # a real reward replaces a missing one; a missing one never replaces a real one
    ledger.put_many("s", "query", ["b", "a"], [0.5, math.nan])
    got = ledger.get_many("s", "query", ["a", "b"])
    assert got == {text_hash("a"): 0.25, text_hash("b"): 0.5}
    with pytest.raises(ValueError):
        ledger.put_many("s", "query", ["a"], [0.1, 0.2])


def test_many_lookups_beyond_one_statement(ledger):
    texts = [f"doc {i}" for i in range(1300)]
    ledger.put_many("s", "q", texts, np.linspace(0, 1, len(texts)))
    got = ledger.get_many("s", "q", texts)
    assert len(got) == 1300 and got[text_hash("doc 1299")] == 1.0


def test_second_call_pays_nothing(ledger):
    inner = Counting()
    scorer = LedgerScorer(inner, ledger, chunk_size=4)
    assert isinstance(scorer, Scorer)
    q, docs = Item("q", "what is a ledger"), items("d", 10)
    first = scorer.score(q, docs)
    expected = [reward_of(q.text, d.text) for d in docs]
    np.testing.assert_array_equal(first, expected)
    assert scorer.counts() == LedgerCounts(requested=10, cached=0, paid=10, missing=0)
    assert inner.calls == 3  # chunks of 4, 4, 2
    second = scorer.score(q, docs)
    np.testing.assert_array_equal(second, first)
    assert scorer.counts() == LedgerCounts(requested=20, cached=10, paid=10, missing=0)
    assert len(inner.asked) == 10
    # a new process (new scorer, same file) is served from disk too
    again = LedgerScorer(Counting(), Ledger(ledger.path))
    np.testing.assert_array_equal(again.score(q, docs), first)
    assert again.paid == 0 and again.cached == 10


def test_nested_larger_budget_pays_only_new_pairs(ledger):
    inner = Counting()
    scorer = LedgerScorer(inner, ledger)
    queries = [Item(f"q{i}", f"query text {i}") for i in range(3)]
    docs = items("d", 30)
    for q in queries[:2]:
        scorer.score(q, docs[:10])
    assert scorer.paid == 20
    for q in queries:
        scorer.score(q, docs[:20])
    assert scorer.paid == 20 + 2 * 10 + 20
    assert scorer.cached == 20
    assert len(set(inner.asked)) == len(inner.asked) == 60


def test_spec_isolation_uses_identity(ledger):
    q, docs = Item("q", "query"), items("d", 5)
    a, b = Counting("fake:a"), Counting("fake:b")
    LedgerScorer(a, ledger).score(q, docs)
    LedgerScorer(b, ledger).score(q, docs)
    assert len(a.asked) == len(b.asked) == 5
    c = Counting("fake:a")
    c.identity = "fake:a instruction='other'"
    LedgerScorer(c, ledger).score(q, docs)
    assert len(c.asked) == 5
    assert sorted(ledger.specs()) == ["fake:a", "fake:a instruction='other'", "fake:b"]


def test_duplicates_in_one_call_are_paid_once(ledger):
    inner = Counting()
    scorer = LedgerScorer(inner, ledger)
    q = Item("q", "query")
    docs = [Item("x1", "same text"), Item("x2", "other"), Item("x3", "same text")]
    r = scorer.score(q, docs)
    assert r[0] == r[2] and len(inner.asked) == 2
    assert scorer.counts() == LedgerCounts(requested=3, cached=1, paid=2, missing=0)
    assert scorer.score(q, []).shape == (0,)


def test_missing_is_recorded_paid_and_not_retried_unless_asked(ledger):
    inner = Counting(nan_for=frozenset({"bad doc"}))
    scorer = LedgerScorer(inner, ledger)
    q, docs = Item("q", "query"), [Item("a", "good doc"), Item("b", "bad doc")]
    r = scorer.score(q, docs)
    assert not math.isnan(r[0]) and math.isnan(r[1])
    assert scorer.counts() == LedgerCounts(requested=2, cached=0, paid=2, missing=1)
    r2 = scorer.score(q, docs)
    assert math.isnan(r2[1]) and scorer.paid == 2 and len(inner.asked) == 2
    retry_inner = Counting()  # now the scorer answers
    retry = LedgerScorer(retry_inner, ledger, retry_missing=True)
    r3 = retry.score(q, docs)
    assert retry_inner.asked == [("query", "bad doc")]
    assert r3[1] == reward_of("query", "bad doc") and r3[0] == r[0]
    assert LedgerScorer(Counting(), ledger).score(q, docs)[1] == r3[1]


def test_bad_inner_scorers_are_errors(ledger):
    class Wrong:
        spec, mapping = "fake:wrong", "fake"

        def __init__(self, out):
            self.out = out

        def score(self, query, docs):
            return self.out

    q, docs = Item("q", "query"), items("d", 2)
    with pytest.raises(BackendError, match="shape"):
        LedgerScorer(Wrong(np.zeros(3)), ledger).score(q, docs)
    with pytest.raises(BackendError, match=r"outside \[0, 1\]"):
        LedgerScorer(Wrong(np.array([0.5, 3.0])), ledger).score(q, docs)
    assert ledger.count() == 0
    with pytest.raises(ConfigError):
        LedgerScorer(Counting(), ledger, chunk_size=0)


def test_unknown_schema_version_is_refused(tmp_path):
    path = tmp_path / "future.sqlite"
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA user_version=99")
    with pytest.raises(StateMismatch, match="schema version 99"):
        Ledger(path)


KILL_SCRIPT = textwrap.dedent("""
    import hashlib, sys, time
    import numpy as np
    from tttembed.score.base import Item
    from tttembed.score.ledger import Ledger, LedgerScorer

    ledger_path, log_path, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])

    def reward_of(query, doc):
        h = hashlib.sha256(f"{query}\\x00{doc}".encode()).digest()
        return int.from_bytes(h[:4], "big") / 2**32

    class Slow:
        spec, mapping = "fake:slow", "fake"
        def score(self, query, docs):
            with open(log_path, "a") as f:  # logged as paid before the work is done
                f.write("".join(f"{query.id}\\t{d.id}\\n" for d in docs))
            time.sleep(delay)
            return np.array([reward_of(query.text, d.text) for d in docs])

    scorer = LedgerScorer(Slow(), Ledger(ledger_path), chunk_size=4)
    for qi in range(2):
        query = Item(f"q{qi}", f"query number {qi}")
        scorer.score(query, [Item(f"d{i}", f"document d number {i}") for i in range(40)])
""")


def _count(db: Path) -> int:
    """Rows committed so far, read with a plain read-only connection."""
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as raw:
            return int(raw.execute("SELECT COUNT(*) FROM rewards").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def _logged(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split("\t")) for line in path.read_text().splitlines()]


def test_sigkill_mid_scoring_then_restart(tmp_path):
    script = tmp_path / "score_slowly.py"
    script.write_text(KILL_SCRIPT)
    db, log = tmp_path / "ledger.sqlite", tmp_path / "paid.log"
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(log), "0.05"])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if _count(db) >= 12:  # three chunks committed
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the scoring process ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    ledger = Ledger(db)
    committed = ledger.count("fake:slow")
    paid_before = _logged(log)
    lost = len(paid_before) - committed
    assert 12 <= committed < 80 and 0 <= lost <= 4  # at most the chunk in flight

    # restart: the same work with a fast scorer that logs what it pays
    inner = Counting("fake:slow")
    scorer = LedgerScorer(inner, ledger, chunk_size=4)
    queries = [Item(f"q{qi}", f"query number {qi}") for qi in range(2)]
    docs = [Item(f"d{i}", f"document d number {i}") for i in range(40)]
    before = {q.text: ledger.get_many("fake:slow", q.text, [d.text for d in docs])
              for q in queries}
    for q in queries:
        r = scorer.score(q, docs)
        np.testing.assert_array_equal(r, [reward_of(q.text, d.text) for d in docs])
    repaid = set(inner.asked)
    for q in queries:  # every pair committed before the kill is served from the ledger
        for d in docs:
            if text_hash(d.text) in before[q.text]:
                assert (q.text, d.text) not in repaid
    assert scorer.cached == committed and scorer.paid == 80 - committed
    assert len(paid_before) + scorer.paid == 80 + lost  # the lost chunk was paid twice
    assert ledger.count("fake:slow") == 80
