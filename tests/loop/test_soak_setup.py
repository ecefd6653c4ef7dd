"""The soak run's setup and report (benchmarks/_soak_setup.py, _soak_report.py,
bench_soak.py's command line): the stand-in judge answers the questions the traffic asks
from their labels, the audit covers them, the JSON is strict, bad arguments are one-line
errors, and every child (wrk included) is stopped."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

import _soak_report as rep  # noqa: E402
import _soak_setup as setup  # noqa: E402


def _folder(tmp_path: Path) -> Path:
    """A BEIR folder whose train and test questions judge different documents."""
    f = tmp_path / "toy"
    (f / "qrels").mkdir(parents=True)
    docs = {"d1": "photosynthesis turns light into sugar in leaves",
            "d2": "the stock market fell on tuesday after the report",
            "d3": "volcanoes erupt when magma pressure builds"}
    (f / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v})
                                            + "\n" for k, v in docs.items()))
    qs = {"tr1": "why did shares drop", "te1": "how do plants make food"}
    (f / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n"
                                             for k, v in qs.items()))
    (f / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\ntr1\td2\t1\n")
    (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nte1\td1\t1\n")
    return f


def test_the_judge_answers_a_train_question_from_its_label(tmp_path):
    """Task(...) was built positionally, so the splits landed in ``head`` and the judge was
    started with ``--splits test``: a train question (the traffic) was scored by word
    overlap. Its gold document must score 1.0, another 0.0."""
    from rerank_server import Judge

    folder = _folder(tmp_path)
    task = setup.prepare_task(folder, 0, tmp_path / "work", index=tmp_path / "idx")
    assert task.splits == ("train", "test") and task.stream == ["tr1"] and task.head == []
    assert task.test == ["te1"] and task.stream_split == "train"
    cmd = setup.judge_proc(task, tmp_path, {}, 1).cmd
    splits = tuple(cmd[cmd.index("--splits") + 1].split(","))
    assert splits == ("train", "test"), cmd
    judge = Judge(folder, 0.0, 0, splits)
    texts = json.loads("[" + ",".join((folder / "corpus.jsonl").read_text().split("\n")[:-1])
                       + "]")
    text = {d["_id"]: d["text"] for d in texts}
    assert judge.score("why did shares drop", text["d2"]) == 1.0
    assert judge.score("why did shares drop", text["d1"]) == 0.0
    assert judge.score("how do plants make food", text["d1"]) == 1.0


def test_the_audit_covers_the_questions_the_traffic_asks(tmp_path):
    task = setup.prepare_task(_folder(tmp_path), 0, tmp_path / "work", index=tmp_path / "i")
    assert task.audit == f"qrels:{task.folder / 'qrels' / 'train.tsv'}"
    from tttembed.loop.drift import audit_source

    assert audit_source(task.audit)[1] == "train"


def test_the_report_is_strict_json():
    got = rep.strict({"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": "x"})
    assert got == {"a": None, "b": [1.0, None, {"c": None}], "d": "x"}
    json.dumps(got, allow_nan=False)


def test_a_promotion_no_search_followed_is_not_a_missed_reach():
    rows = [rep.Row(r, "search", t, t + 0.01, 200, "s", "v1", 0)
            for r in "ab" for t in (10.0, 11.0, 12.0, 14.0)]
    history = [{"action": "promote", "version": "v1", "time": 9.5},
               {"action": "promote", "version": "v2", "time": 20.0}]
    reach = rep.promotion_reach(history, rows, 0.0)
    assert reach[0]["measured"] and reach[0]["reached_both"]
    assert not reach[1]["measured"] and "traffic had stopped" in reach[1]["reason"]
    assert reach[1]["seen_after_s"] == {"a": None, "b": None}


def test_a_promotion_while_a_replica_is_down_is_timed_from_its_return():
    """Replica b killed at 5 s and healthy at 30 s; a promotion at 8 s reaches b when b
    answers with it after its return (0.5 s later), not 22.5 s late."""
    rows = [rep.Row("a", "search", t, t + 0.01, 200, "s", "v2", 0) for t in (8.1, 9.0, 40.0)]
    rows += [rep.Row("b", "search", t, t + 0.01, 200, "s", "v2", 0) for t in (30.49, 40.0)]
    history = [{"action": "promote", "version": "v2", "time": 8.0}]
    x = rep.promotion_reach(history, rows, 0.0, {"b": (5.0, 30.0)})[0]
    assert x["reached_both"] and x["seen_after_s"]["b"] == pytest.approx(0.5)
    late = rep.promotion_reach(history, rows, 0.0)[0]
    assert not late["reached_both"] and late["seen_after_s"]["b"] == pytest.approx(22.5)


def test_the_p99_thirds_and_the_paired_new_questions():
    rows = [rep.Row("a", "search", t, t + (0.01 if t < 200 else 0.05), 200, "s", "raw", 0)
            for t in range(0, 300)]
    first, last = rep.p99_first_last(rows, 0.0, 300.0, {})
    assert first == pytest.approx(10.0) and last == pytest.approx(50.0)
    raw = {f"q{i}": 0.5 for i in range(30)}
    end = {f"q{i}": 0.6 for i in range(30)}
    got = rep.paired(raw, end)
    assert got["raw"] == 0.5 and got["end"] == 0.6 and got["p"] < 0.05
    assert rep.paired(raw, dict(raw))["p"] == 1.0


def test_learner_cycle_times_are_read_from_its_log(tmp_path):
    log = tmp_path / "learner.log"
    t0 = time.mktime(time.strptime("2026-12-05 20:00:00", "%Y-%m-%d %H:%M:%S"))
    log.write_text("2026-12-05 20:00:30,1 tttembed.loop INFO cycle 1 (2.0 s): refused\n"
                   "2026-12-05 20:01:30,1 tttembed.loop INFO cycle 2 (4.0 s): promoted\n"
                   "2026-12-05 20:09:30,1 tttembed.loop INFO cycle 3 (9.5 s): refused\n")
    got = rep.learner_cycles(log, t0)
    assert got == {"first": 2.0, "median_first_5min": 3.0, "last": 9.5, "cycles": 3}


@pytest.mark.parametrize("args, said", [
    (["--minutes", "0"], "--minutes 0: give a number above 0"),
    (["--minutes", "-1"], "--minutes -1: give a number above 0"),
    (["--load", "0"], "--load 0: give a number above 0"),
    (["--data", "nosuch"], "--data nosuch: not a BEIR folder"),
    (["--ports", "9-3", "--data", "DATA"], "--ports 9-3: give a range LO-HI"),
    # issue 77 trust round 6: refused at the start, not after a whole soak
    (["--budget", "-5"], "--budget -5: give a number >= 0"),
    (["--rpm", "0"], "--rpm 0: give the judge's pairs per minute, above 0"),
    (["--learn-every", "0"], "--learn-every 0: give 1 or more rewarded pairs"),
    (["--settle-s", "-1"], "--settle-s -1: give a number >= 0"),
    (["--data", "TRAIN-ONLY"], "no test question (qrels/test.tsv judging a question"),
])
def test_bad_arguments_are_one_line_errors(args, said, tmp_path):
    if shutil.which("wrk") is None and "--ports" in args:
        pytest.skip("wrk is not installed: the arguments before it are checked first")
    if "TRAIN-ONLY" in args:  # a folder with no test split: "0 test questions replayed"
        (_folder(tmp_path) / "qrels" / "test.tsv").unlink()
    args = [str(_folder(tmp_path)) if a == "DATA" else
            str(tmp_path / "toy") if a == "TRAIN-ONLY" else a for a in args]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_soak.py"), *args],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode != 0 and said in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_wrk_is_a_child_every_exit_path_stops(tmp_path):
    """wrk runs in CHILDREN (its own process group), so stop_all (every exit path of the
    benchmark: the end, an error, Ctrl-C, SIGTERM) stops it: a real wrk on a dead port."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install -y wrk)")
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from _loop_support import CHILDREN

    class Ok(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    data = tmp_path / "data.lua"
    data.write_text('return {bodies = {"{}"}, rel = {{}}, cdf = {1.0}}\n')
    try:
        proc = setup.start_wrk(f"http://127.0.0.1:{server.server_port}", 1, 300,
                               tmp_path / "wrk-x", data, 2.0, 0, "x")
        assert proc in CHILDREN.procs
        time.sleep(1.5)
        assert proc.poll() is None, (tmp_path / "wrk-x.out").read_text()
        CHILDREN.stop_all()
        assert proc.poll() is not None
    finally:
        server.shutdown()


def test_every_option_of_the_soak_says_what_it_does():
    """Project rule: help text on every option (``--capacity-s``, ``--load``,
    ``--threads``, ``--learn-every`` and ``--seed`` had none)."""
    import bench_soak

    bare = [a.option_strings[0] for a in bench_soak.parser()._actions
            if a.option_strings and not (a.help or "").strip()]
    assert bare == []


def test_a_signal_while_a_child_starts_still_stops_that_child(tmp_path, monkeypatch):
    """SIGTERM arriving while Popen is starting a child (after its exec, before the
    benchmark holds it): the stop that follows must still reach that child (CI once left
    a wrk running this way)."""
    import os
    import signal
    import subprocess as sp

    from _loop_support import Children

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop()

    real = sp.Popen

    def popen_then_signal(*a, **kw):
        proc = real(*a, **kw)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered inside Popen, as on a busy machine
        return proc

    children = Children()
    previous = signal.signal(signal.SIGTERM, handler)
    monkeypatch.setattr(sp, "Popen", popen_then_signal)
    try:
        with pytest.raises(Stop):
            children.start(["sleep", "60"], tmp_path / "log", dict(os.environ))
    finally:
        signal.signal(signal.SIGTERM, previous)
        monkeypatch.undo()
    assert len(children.procs) == 1, "the child started during the signal is not held"
    proc = children.procs[0]
    children.stop_all()
    assert proc.poll() is not None


def test_the_rss_goal_holds_postgres_private_memory_not_its_buffer_cache():
    got = rep.held_growth({"a#1": 0.01, "postgres#2": 0.12, rep.PG_SHARED + "#2": 0.9,
                           "wrk-soak-a": 3.0, "learner#1": None})
    assert sorted(got) == [0.01, 0.12]


def test_postgres_memory_is_split_into_private_and_shared(tmp_path):
    """Reading a table (under a quarter of shared_buffers: no ring buffer) into the
    buffer cache grows the shared part, not the private one
    (the soak holds only the private part to its growth goal)."""
    pytest.importorskip("psycopg")
    sys.path.insert(0, str(ROOT))
    from tests.pg import postgres_bindir, postgres_instance

    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    import psycopg
    from bench_soak import tree_rss

    with postgres_instance(tmp_path) as db:
        pid = int((Path(db.root) / "data" / "postmaster.pid").read_text().split()[0])
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t AS SELECT g, repeat('x', 400) AS pad "
                         "FROM generate_series(1, 50000) g")
            conn.execute("SELECT count(*) FROM t").fetchone()
            private0, shared0 = tree_rss(pid)
            conn.execute("CREATE TABLE u AS SELECT g, repeat('y', 400) AS pad "
                         "FROM generate_series(1, 50000) g")
            for _ in range(2):
                conn.execute("SELECT count(*) FROM u").fetchone()
            private1, shared1 = tree_rss(pid)
    assert shared1 - shared0 > 10_000, (shared0, shared1)  # KiB: ~22 MB read into cache
    assert private1 - private0 < 0.5 * (shared1 - shared0), (private0, private1)



class _Learner:
    """A learner still paying after the traffic stopped. Each read of ``/v1/loop`` or of
    the counts is one tick; ``events`` ``(tick, what, n)``: at that tick the learner
    reserves ``n`` pairs (the spend account, what ``/v1/loop`` says) or the judge's
    answers to ``n`` land in the ledger. A read sees the ticks up to its own."""

    def __init__(self, events: list[tuple[int, str, int]]) -> None:
        self.events, self.tick = events, -1
        self.spend = self.ledger = 159

    def _read(self) -> None:
        self.tick += 1
        for at, what, n in self.events:
            if at == self.tick:
                if what == "reserve":
                    self.spend += n
                else:
                    self.ledger += n

    def loop(self) -> list[dict]:
        self._read()
        return [{"pairs_judged": self.spend, "learning": self.spend != self.ledger}] * 2

    def counts(self) -> dict:
        self._read()
        return {"spend": self.spend, "drift": 0, "ledger_rows": self.ledger,
                "judge_answered": self.ledger}


@pytest.mark.parametrize("events", [
    [(1, "reserve", 13), (1, "answer", 13)],             # paid between the two reads
    [(0, "reserve", 15), (2, "answer", 15)],             # answered after the counts
    [(1, "reserve", 9), (1, "answer", 9), (4, "reserve", 4), (5, "answer", 4)]])
def test_the_books_are_read_when_the_learner_is_done_paying(events):
    """/v1/loop's paid and the ledger are read while the learner pays nothing: pairs paid
    between the two reads are not a gap (red before: one read each, 172 vs 159)."""
    learner, naps = _Learner(events), []
    final, got, settled = rep.settled_books(learner.loop, learner.counts, sleep=naps.append,
                                            clock=lambda: float(len(naps)))
    assert settled
    assert got["ledger_rows"] + got["drift"] == final[0]["pairs_judged"] == got["spend"]
    assert got["spend"] == 159 + sum(n for _, what, n in events if what == "reserve")


def test_books_that_never_settle_are_said_so():
    """A learner that pays at every read: after the timeout, the last read, not settled."""
    learner = _Learner([(t, w, 1) for t in range(1, 1000) for w in ("reserve", "answer")])
    naps: list[float] = []
    _, _, settled = rep.settled_books(learner.loop, learner.counts, pause_s=1.0,
                                      timeout_s=10.0, sleep=naps.append,
                                      clock=lambda: float(len(naps)))
    assert not settled and len(naps) == 10


def _reconciled(**over: object) -> dict:
    """The figures of a 30-second soak whose every account reconciles: one promotion that
    reached both replicas but that no search followed (unmeasured), and nothing timed or
    learned to measure (no quiet p99, no RSS growth, no replay, no cycle)."""
    f = {"minutes": 0.5, "rss_growth": {"a#1": None}, "judge_answered": 10,
         "ledger_paid": 10, "loop_paid": 10, "searches_dropped_said": 0,
         "errors_other_replica": 0, "searches_answered": 50, "searches_logged": 50,
         "clicks_sent": 5, "clicks_stored": 5, "promotions": 1, "promotions_unmeasured": 1,
         "promotions_reached_both": 1, "refused_versions_served": 0,
         "p99_during_promotion_ms": math.nan, "p99_quiet_ms": math.nan,
         "p99_first_ms": math.nan, "p99_last_ms": math.nan,
         "served_ndcg10_new": {"raw": None, "end": None, "p": None},
         "served_ndcg10_asked": {"raw": None, "end": None},
         "learner_cycle_s": {"first": None, "median_first_5min": None, "last": None},
         "learner_rss_growth_after_budget": None,
         "detail": {"searches": {"answered_not_logged": 0, "logged_not_answered": 0,
                                 "logged_not_answered_at_kill": 0},
                    "promotions": [{"measured": False, "reached_both": True}]}}
    f.update(over)
    return f


def test_a_goal_that_cannot_be_measured_reads_n_a_with_why_not_missed(capsys):
    """issue 77 trust round 6: a 30-second soak that reconciles every account printed
    "goal reach = -1.0 MISSED" (an unmeasured promotion that reached both was taken off
    twice) and "None MISSED"; each such goal now reads "n/a (why)" and is not a miss."""
    assert rep.goals(_reconciled())
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("goal ")]
    assert len(lines) == len(rep.goal_values(_reconciled())), out
    bad = [line for line in lines if re.search(r"MISSED|None|-1\.0|\bnan\b", line)]
    assert not bad, bad
    reach = next(line for line in lines if line.startswith("goal reach:"))
    assert "= n/a (no promotion was followed by searches on both replicas" in reach, reach
    assert all(line.endswith(" met") or "= n/a (" in line for line in lines), lines
    assert sum("= n/a (" in line for line in lines) == 9, lines


def test_a_measured_promotion_that_missed_its_reach_is_still_missed(capsys):
    late = {"measured": True, "reached_both": False}
    f = _reconciled(promotions=2, detail={**_reconciled()["detail"],
                            "promotions": [late, {"measured": False, "reached_both": True}]})
    assert not rep.goals(f)
    reach = next(line for line in capsys.readouterr().out.splitlines()
                 if line.startswith("goal reach:"))
    assert reach.endswith("= 1.0 (goal == 0) MISSED"), reach
