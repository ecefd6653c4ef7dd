"""What ``bench_soak.py`` measures and writes: wrk's per-request logs (:func:`read_logs`),
the counts of the store, the ledger and the judge (:func:`counts`), the figures of the
issue's report (:func:`figures`), the goals (:func:`goals`), and the markdown and PNG
beside the JSON (:func:`write_report`).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _soak_store import goal_values as kept_goals

#: A promotion must be served by both replicas within the registry poll (1 s) + 2 s.
REACH_S = 3.0
WINDOW_S = 10.0


@dataclass
class Row:
    replica: str
    kind: str
    sent: float
    done: float
    status: int
    sid: str
    version: str
    extra: int


def read_logs(prefix: Path, replica: str) -> tuple[list[Row], dict[str, int]]:
    """Every line wrk's threads logged for ``prefix`` (SOAK_LOG), and its error counts."""
    rows: list[Row] = []
    for path in sorted(prefix.parent.glob(prefix.name + ".*")):
        if not path.suffix[1:].isdigit():
            continue
        for line in path.read_text().splitlines():
            f = line.split("\t")
            if len(f) < 7:
                continue  # a line cut by a kill
            rows.append(Row(replica, f[0], float(f[1]), float(f[2]), int(f[3]), f[4], f[5],
                            int(f[6] or 0)))
    err_file = prefix.parent / (prefix.name + ".errors")
    errors = json.loads(err_file.read_text()) if err_file.exists() else {}
    return rows, errors


def socket_errors(errors: dict[str, int]) -> int:
    return sum(int(errors.get(k, 0)) for k in ("connect", "read", "write", "timeout"))


def p(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) * 1000 if xs else math.nan


def inside(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in windows)


# -- counts from the store, the ledger, the judge ---------------------------------------------
#: Rows retention pruned or a forget removed from ``table`` (the store's tallies), as SQL.
GONE = ("(SELECT COALESCE(SUM(n), 0) FROM tallies WHERE kind IN ('pruned', 'forgotten') "
        "AND tkey = '{}')")


def counts(db_url: str, ledger: Path, judge_file: Path,
           seen: dict[str, tuple[str, float]] | None = None) -> dict[str, Any]:
    """The books at the end. Searches and clicks count the rows kept and those pruned
    (one statement: one snapshot, while the pruners go on); ``seen``: the search ids
    the soak read from the store as it ran (:class:`_soak_store.StoreWatch`: retention
    pruned the older ones), merged with those left."""
    import psycopg

    out: dict[str, Any] = {}
    with psycopg.connect(db_url, autocommit=True) as conn:
        for key, sql in (
                # the soak's traffic is searches and clicks only: the pruned searches and
                # events are its searches and clicks
                ("searches", "SELECT (SELECT count(*) FROM searches WHERE kind = 'search') "
                             f"+ {GONE.format('searches')}"),
                ("clicks", "SELECT (SELECT count(*) FROM events WHERE action = 'click') "
                           f"+ {GONE.format('events')}"),
                ("feedback", "SELECT count(*) FROM feedback"),
                ("drift", "SELECT COALESCE(SUM(pairs), 0) FROM spend WHERE source = 'drift'"),
                ("spend", "SELECT COALESCE(SUM(pairs), 0) FROM spend"),
                # reservations still open at the end, by state: never sent, sent (its
                # answer not yet stored), sent with the answer lost (kept as paid)
                ("reserved_unsent", "SELECT count(*) FROM reserved WHERE sent = 0"),
                ("reserved_sent", "SELECT count(*) FROM reserved WHERE sent = 1"),
                ("reserved_lost", "SELECT count(*) FROM reserved WHERE sent = 2"),
                ("rewards_paid", "SELECT COALESCE(SUM(paid), 0) FROM rewards")):
            try:
                out[key] = int(conn.execute(sql).fetchone()[0])
            except psycopg.Error:
                out[key] = 0
        try:  # the account by source: charged (> 0) and given back (< 0) apart
            rows = conn.execute("SELECT source, SIGN(pairs), SUM(pairs), COUNT(*) FROM spend "
                                "GROUP BY source, SIGN(pairs)").fetchall()
            out["spend_by_source"] = {f"{src} {'+' if sg > 0 else '-'}": [int(n), int(k)]
                                      for src, sg, n, k in rows}
        except psycopg.Error:
            out["spend_by_source"] = {}
    out["ledger_rows"] = 0
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            out["ledger_rows"] = int(db.execute("SELECT count(*) FROM rewards").fetchone()[0])
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT search_id, replica, created FROM searches "
                            "WHERE kind = 'search'").fetchall()
    out["logged_ids"] = {**(seen or {}),
                         **{str(sid): (str(r), float(t)) for sid, r, t in rows}}
    out["judge_answered"] = sum(int(x) for x in judge_file.read_text().split()) \
        if judge_file.exists() else 0
    return out


#: Seconds :func:`settled_books` waits for the learner to stop paying after the soak.
BOOKS_TIMEOUT_S = 300.0


def settled_books(read_loop: Callable[[], list[dict[str, Any]]],
                  read_counts: Callable[[], dict[str, Any]], *, pause_s: float = 1.0,
                  timeout_s: float = BOOKS_TIMEOUT_S,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic
                  ) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
    """``/v1/loop`` (each replica's: ``read_loop``) and :func:`counts` (``read_counts``),
    read while the learner pays nothing, and whether they were. The learner goes on after
    the traffic stops (pending pairs, a cycle's validation pairs), and ``/v1/loop``'s paid
    (the spend account), the ledger and the judge's count are read one after the other:
    a pair reserved or answered between two of the reads is a gap in the books that is
    not one (a soak read 172 in the ledger against 159 paid). So: status, counts, status
    again, until two such reads in a row, ``pause_s`` apart, find the learner not learning
    and the same books; past ``timeout_s``, the last read (settled False)."""
    deadline, last = clock() + timeout_s, None
    while True:
        before = read_loop()
        got = read_counts()
        after = read_loop()
        books = _books(before[0], got, after[0])
        if (books is not None and books == last) or clock() >= deadline:
            return after, got, books is not None and books == last
        last = books
        sleep(pause_s)


def _books(before: dict[str, Any], got: dict[str, Any], after: dict[str, Any]
           ) -> tuple[int, ...] | None:
    """What one read of the books found (paid, drift re-scores, ledger rows, judge
    answered), or None when the learner was learning or paid between the two status
    reads."""
    paid = int(before.get("pairs_judged") or 0)
    if before.get("learning") or after.get("learning") or \
            paid != int(after.get("pairs_judged") or 0):
        return None
    return (paid, int(got["spend"]), int(got["drift"]), int(got["ledger_rows"]),
            int(got["judge_answered"]))


def said_dropped(logs: list[Path], final_loops: list[dict[str, Any]]) -> int:
    """Searches the replicas said they could not log: their log lines, and what
    ``/v1/loop`` of the running ones counts (``serving.unlogged_dropped``)."""
    n = sum(int(m) for log in logs if log.exists()
            for m in re.findall(r"(\d+) searches were not logged", log.read_text()))
    return n + sum(int((s.get("serving") or {}).get("unlogged_dropped") or 0)
                   for s in final_loops)


# -- the figures ----------------------------------------------------------------------------------
def promotion_reach(history: list[dict[str, Any]], rows: list[Row], since: float,
                    down: dict[str, tuple[float, float]] | None = None
                    ) -> list[dict[str, Any]]:
    """Each promotion or rollback after ``since``: when each replica first answered with
    the version it named, counted from the promotion, or for one made while that replica
    was down (``down``: replica -> (killed, healthy again)) from its return."""
    searches = sorted((r for r in rows if r.kind == "search" and r.status == 200),
                      key=lambda r: r.done)
    out = []
    for h in history:
        t = float(h.get("time") or 0)
        if t < since or h.get("action") not in ("promote", "rollback"):
            continue
        target = h.get("version") or "raw"
        seen: dict[str, float | None] = {}
        for rep in ("a", "b"):
            lo, hi = (down or {}).get(rep, (math.inf, math.inf))
            start = hi if lo <= t < hi else t  # down at the promotion: from its return
            first = next((r.done for r in searches if r.replica == rep and r.done >= start
                          and r.version == target), None)
            seen[rep] = None if first is None else first - start
        # measurable: each replica answered a search sent after the reach time
        measured = all(any(r.replica == rep and r.sent >= t + REACH_S for r in searches)
                       for rep in ("a", "b"))
        row = {"action": h["action"], "version": target, "by": h.get("by"), "time": t,
               "seen_after_s": seen, "measured": measured,
               "reached_both": all(v is not None and v <= REACH_S for v in seen.values())}
        if not measured:
            row["reason"] = ("no search was sent to both replicas after it (the traffic had "
                             "stopped): its reach is not measured")
        out.append(row)
    return out


def strict(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float as None (null): JSON any parser reads."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def paired(raw: dict[str, float], end: dict[str, float], seed: int = 0
           ) -> dict[str, Any]:
    """Mean nDCG@10 of the same questions on raw and at the end, and the two-sided
    paired sign-flip p of the mean difference (10,000 flips, seeded)."""
    from tttembed.adapt.validate import sign_flip_p

    qs = [q for q in raw if q in end]
    d = np.array([end[q] - raw[q] for q in qs])
    p_value = sign_flip_p(d, np.zeros(len(d)), 10_000, np.random.default_rng(seed)) \
        if len(d) > 1 and np.any(d != 0) else 1.0
    return {"raw": round(float(np.mean([raw[q] for q in qs])), 4) if qs else None,
            "end": round(float(np.mean([end[q] for q in qs])), 4) if qs else None,
            "p": round(p_value, 4), "n": len(qs)}


def learner_cycles(log: Path, t0: float) -> dict[str, Any]:
    """The learner's cycle times from its log (``cycle N (S s): ...``): the first, the
    median of those that ended in the soak's first 5 minutes (capacity phase included),
    the last."""
    import time as _time

    got: list[tuple[float, float]] = []
    for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \S+ \w+ cycle \d+ "
                     r"\(([\d.]+) s\)", line)
        if m:
            at = _time.mktime(_time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
            got.append((at, float(m.group(2))))
    early = [sec for at, sec in got if at <= t0 + 300]
    return {"first": got[0][1] if got else None,
            "median_first_5min": float(np.median(early)) if early else None,
            "last": got[-1][1] if got else None, "cycles": len(got)}


def budget_spent_at(pairs: list[tuple[float, int, int]]) -> float | None:
    """When ``/v1/loop``'s ``pairs_judged`` first reached its ``judge_budget``."""
    return next((t for t, paid, budget in pairs if budget and paid >= budget), None)


def growth_since(samples: list[tuple[float, float]], since: float | None) -> float | None:
    """Last RSS over the RSS at ``since``, minus 1 (None: no sample after ``since``)."""
    if since is None:
        return None
    xs = [(t, v) for t, v in samples if v == v and t >= since]
    return round(xs[-1][1] / xs[0][1] - 1, 4) if len(xs) > 1 else None


def p99_first_last(searches: list[Row], t0: float, t1: float,
                   faults: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """p99 (ms) of the searches sent in the first third of the soak after its first
    minute (at most 10 minutes) and in its last third (at most its last 10 minutes);
    the fault windows (b down, PostgreSQL down, each + 10 s) left out of both."""
    third = min((t1 - t0) / 3, 600.0)
    lat = [(r.sent, r.done - r.sent) for r in searches if r.status == 200
           and not inside(r.sent, list(faults.values()))]
    first = [x for t, x in lat if t0 + 60 <= t < t0 + 60 + third]
    last = [x for t, x in lat if t1 - third <= t < t1]
    return round(p(first, 99), 2), round(p(last, 99), 2)


#: The series of PostgreSQL's shared memory (its buffer cache, bounded by shared_buffers),
#: one per instance (``#1``, ``#2`` after a restart): reported beside the processes' RSS,
#: not held to the growth goal.
PG_SHARED = "postgres-shared"


def held_growth(growth: dict[str, float | None]) -> list[float]:
    """The RSS growths the goal holds: the system's processes (not wrk, the load) and
    PostgreSQL's private memory, not its buffer cache (:data:`PG_SHARED`)."""
    return [v for k, v in growth.items() if v is not None and not k.startswith("wrk")
            and not k.startswith(PG_SHARED)]


def rss_growth(rss: dict[str, list[tuple[float, float]]], t0: float, after: float
               ) -> dict[str, float | None]:
    """Per process (instance): its last RSS over its RSS ``after`` s into the soak (or
    into its own life, for one started during the soak), minus 1; None for one that did
    not live long enough after that."""
    out: dict[str, float | None] = {}
    for name, samples in rss.items():
        xs = [(t, v) for t, v in samples if v == v]
        if not xs:
            continue
        start = max(xs[0][0], t0) + after
        base = next((v for t, v in xs if t >= start), None)
        out[name] = None if base is None or xs[-1][0] < start + after / 2 else \
            round(xs[-1][1] / base - 1, 4)
    return out


def cpu_per_min(cpu: dict[str, list[tuple[float, float]]], t0: float, t1: float,
                span: float = 300.0) -> dict[str, dict[str, float | None]]:
    """Per process (instance): the CPU core-seconds it used per minute over the soak's
    first and last ``span`` s (None where it did not live through one)."""
    def rate(xs: list[tuple[float, float]], a: float, b: float) -> float | None:
        got = [(t, v) for t, v in xs if a <= t <= b]
        if len(got) < 2 or got[-1][0] - got[0][0] < span / 2:
            return None
        return round(60 * (got[-1][1] - got[0][1]) / (got[-1][0] - got[0][0]), 2)

    return {name: {"first_5min": rate(xs, t0, t0 + span), "last_5min": rate(xs, t1 - span, t1)}
            for name, xs in cpu.items()}


def windows(rows: list[Row], t0: float, t1: float) -> dict[str, list[dict[str, Any]]]:
    """Per replica, per 10 s window of sent time: answered, p50, p99, the version most
    answered."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rep in ("a", "b"):
        by: dict[int, list[Row]] = defaultdict(list)
        for r in rows:
            if r.replica == rep and r.kind == "search" and t0 <= r.sent < t1:
                by[int((r.sent - t0) // WINDOW_S)].append(r)
        out[rep] = []
        for w in range(int(math.ceil((t1 - t0) / WINDOW_S))):
            ok = [r for r in by.get(w, []) if r.status == 200]
            lat = [r.done - r.sent for r in ok]
            versions = [r.version for r in ok]
            out[rep].append({"t": w * WINDOW_S, "answered": len(ok),
                             "failed": len(by.get(w, [])) - len(ok), "p50_ms": p(lat, 50),
                             "p99_ms": p(lat, 99),
                             "version": max(set(versions), key=versions.count)
                             if versions else None})
    return out


def version_number(v: str | None) -> float:
    """vN -> N; raw (or None: a replica serving no version) -> 0."""
    if v is None or v == "raw":
        return 0.0
    return float(v[1:]) if v[1:].isdigit() else math.nan


def _event_time(events: list[dict[str, Any]], name: str) -> float | None:
    return next((e["time"] for e in events if e["event"] == name), None)


def fault_windows(events: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """The serving faults: b down (kill to healthy), PostgreSQL down (stop to start), each
    with 10 s after it."""
    out = {}
    for name, a, b in (("kill", "kill_b", "b_healthy"), ("pg", "pg_stop", "pg_started")):
        ta, tb = _event_time(events, a), _event_time(events, b)
        if ta is not None and tb is not None:
            out[name] = (ta, tb + 10.0)
    return out


def _followups(rows: list[Row], kind: str) -> dict[str, Any]:
    sent = sum(int(r.sid or 0) for r in rows if r.kind == f"{kind}_sent")
    acked = sum(int(r.sid or 0) for r in rows if r.kind == kind and r.status == 202)
    refused: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.kind == kind and r.status != 202:
            refused[str(r.status)] += 1
    lost = sum(int(r.sid or 0) for r in rows if r.kind == f"{kind}_lost")
    return {"sent": sent, "acked": acked, "refused_then_retried": dict(refused), "lost": lost}


def _errors(searches: list[Row], sock: dict[str, int], kill: tuple[float, float] | None
            ) -> dict[str, int]:
    a_fail = sum(r.status != 200 for r in searches if r.replica == "a")
    b_fail = [r for r in searches if r.replica == "b" and r.status != 200]
    in_kill = sum(kill is not None and kill[0] <= r.done < kill[1] for r in b_fail)
    return {"errors_other_replica": a_fail + sock["a"],
            "errors_killed_window": in_kill,
            "errors_killed_replica_outside_window": len(b_fail) - in_kill}


def reconcile(searches: list[Row], logged: dict[str, tuple[str, float]],
              kill: tuple[float, float] | None) -> dict[str, int]:
    """Search ids answered (200) against those in the store: answered and not logged
    (must be said dropped), logged and not answered (a search in flight on replica b
    when it was killed: logged, its answer never sent)."""
    answered = {r.sid for r in searches if r.status == 200 and r.sid}
    not_answered = [t for sid, (_, t) in logged.items() if sid not in answered]
    at_kill = sum(kill is not None and kill[0] - 5 <= t <= kill[0] + 2 for t in not_answered)
    return {"answered_not_logged": len(answered - set(logged)),
            "logged_not_answered": len(not_answered),
            "logged_not_answered_at_kill": at_kill}


def _latency(searches: list[Row], reach: list[dict[str, Any]],
             faults: dict[str, tuple[float, float]], t0: float, t1: float
             ) -> dict[str, float]:
    promo = [(x["time"], x["time"] + REACH_S) for x in reach]
    ok = [r for r in searches if r.status == 200 and t0 <= r.sent < t1]
    quiet = [r.done - r.sent for r in ok if r.sent >= t0 + 10 and not inside(r.sent, promo)
             and not inside(r.sent, list(faults.values()))]
    during = [r.done - r.sent for r in ok if inside(r.sent, promo)]
    return {"p50_quiet_ms": round(p(quiet, 50), 2), "p99_quiet_ms": round(p(quiet, 99), 2),
            "p99_during_promotion_ms": round(p(during, 99), 2),
            "searches_during_promotion": len(during), "searches_quiet": len(quiet)}


def figures(got: dict[str, Any], args: Any) -> dict[str, Any]:
    """The report's keys (the issue's names first), from the run's logs and counts."""
    run, stack, c = got["run"], got["stack"], got["counts"]
    t0, t1 = run["t0"], run["t1"]
    rows, sock = list(got["cap_rows"]), dict(got["cap_errors"])
    for name in ("a", "b"):
        r, e = read_logs(stack.work / f"wrk-soak-{name}", name)
        rows += r
        sock[name] = sock.get(name, 0) + socket_errors(e)
    searches = [r for r in rows if r.kind == "search"]
    faults = fault_windows(run["events"])
    kill = [_event_time(run["events"], e) for e in ("kill_b", "b_healthy")]
    reach = promotion_reach(got["history"], rows, t0, {"b": (kill[0], kill[1])}
                            if kill[0] is not None and kill[1] is not None else {})
    served = {"raw"} | {str(h.get("version")) for h in got["history"] if h.get("version")}
    clicks, feedback = _followups(rows, "click"), _followups(rows, "feedback")
    logs = [stack.work / f"replica-{n}.log" for n in "ab"]
    raw, raw_v, end, end_v = got["ndcg"]
    loop = got["final"][0]
    soak_ok = [r for r in searches if r.status == 200 and t0 <= r.sent < t1]
    new, asked = paired(raw["test"], end["test"]), paired(raw["stream"], end["stream"])
    cycles = learner_cycles(stack.work / "learner.log", t0)
    spent = budget_spent_at(got["sampler"].pairs)
    p99_first, p99_last = p99_first_last(searches, t0, t1, faults)
    out: dict[str, Any] = {
        "minutes": args.minutes, "capacity_qps": round(got["cap"], 2),
        "offered_qps": round(got["offered"], 2),
        "achieved_qps": round(len(soak_ok) / (t1 - t0), 2),
        "searches_answered": sum(r.status == 200 for r in searches),
        **_errors(searches, sock, faults.get("kill")),
        "searches_logged": c["searches"],
        "searches_dropped_said": said_dropped(logs, got["final"]),
        "clicks_sent": clicks["sent"], "clicks_stored": c["clicks"],
        "judge_answered": c["judge_answered"],
        "ledger_paid": c["ledger_rows"] + c["drift"],
        "loop_paid": int(loop.get("pairs_judged") or 0),
        "promotions": len(reach), "promotions_reached_both": sum(x["reached_both"] for x in reach),
        "promotions_unmeasured": sum(not x["measured"] for x in reach),
        "refused_versions_served": sum(r.status == 200 and r.version not in served
                                       for r in searches),
        **_latency(searches, reach, faults, t0, t1),
        "rss_growth": rss_growth(got["sampler"].rss, t0, min(120.0, 0.2 * (t1 - t0))),
        "served_ndcg10_raw": new["raw"], "served_ndcg10_end": new["end"],
        "served_ndcg10_raw_stream": asked["raw"], "served_ndcg10_end_stream": asked["end"],
        "served_ndcg10_new": {k: new[k] for k in ("raw", "end", "p")},
        "served_ndcg10_asked": {k: asked[k] for k in ("raw", "end")},
        "learner_cycle_s": {k: cycles[k] for k in ("first", "median_first_5min", "last")},
        "learner_rss_growth_after_budget": growth_since(
            next((v for k, v in got["sampler"].rss.items() if k.startswith("learner")), []),
            spent),
        "p99_first_ms": p99_first, "p99_last_ms": p99_last,
    }
    out.update(got.get("kept") or {})  # --retain: issue 76's keys (_soak_store.figures)
    out["detail"] = {
        "searches": reconcile(searches, c["logged_ids"], faults.get("kill")),
        "clicks": clicks, "feedback": {**feedback, "stored": c["feedback"]},
        "judge": {"ledger_rows": c["ledger_rows"], "drift_rescores": c["drift"],
                  "reserved_open": {k: c.get(f"reserved_{k}", 0)
                                    for k in ("unsent", "sent", "lost")},
                  "store_rewards_paid": c.get("rewards_paid", 0),
                  "spend_by_source": c.get("spend_by_source", {}),
                  "spend_account": c["spend"], "budget": stack.budget,
                  "batch": JUDGE_BATCH, "books_settled": c.get("settled")},
        "replicas_refused": sum(bool(x.get("refused")) for x in loop.get("replicas") or []),
        "promotions": reach, "faults": run["events"], "manual_version": run["manual"],
        "versions_served_end": end_v, "versions_served_raw_replay": raw_v,
        "loop_end": {k: loop.get(k) for k in ("version", "frozen", "reason", "pairs_judged",
                                              "judge_budget", "promotion_waiting", "caches",
                                              "learner_clicks")},
        "versions": [{k: v.get(k) for k in ("version", "promoted", "served", "reason",
                                            "evidence", "choice", "queries", "promoted_by")}
                     for v in loop.get("versions") or []],
        "socket_errors": sock, "test_questions": len(got["task"].test),
        "served_ndcg10_new": new, "served_ndcg10_asked": asked,
        "learner_cycles": cycles,
        "cpu_core_s_per_min": cpu_per_min(got["sampler"].cpu, t0, t1),
        "budget_spent_at_s": None if spent is None else
        round(spent - t0, 1),
        "judge_splits": list(got["task"].splits), "audit": got["task"].audit,
        "nulls": "null: not measured (a window with no answer, a promotion no search "
                 "followed, a cycle time or RSS with no sample)",
    }
    out["timeline"] = {"t0": t0, "windows": windows(rows, t0, t1),
                       "loops": got["sampler"].loops, "rss": got["sampler"].rss}
    return out


JUDGE_BATCH = 10  # pairs of one judge request: the learner's --judge-depth (default 10)


# -- goals ---------------------------------------------------------------------------------------
#: Why a goal's value could not be measured (printed as "n/a (why)", not as a miss).
UNMEASURED = {
    "reach": "no promotion was followed by searches on both replicas (the traffic had "
             "stopped, or none was made): soak longer",
    "p99": "no p99 in quiet or promotion windows (too few searches answered in them)",
    "rss": "no process lived long enough past the first minutes to measure its growth: "
           "soak longer",
    "ndcg_new": "no held-back test question was replayed on both versions",
    "ndcg_new_p": "no held-back test question was replayed on both versions",
    "ndcg_asked": "the most asked questions were not replayed on both versions",
    "cycles": "no learner cycle in the first 5 minutes, or none at all: soak longer",
    "learner_rss": "the judge budget was not spent before the end (or no RSS sample after "
                   "it)",
    "p99_tail": "too short for a first and a last third after minute 1: soak longer",
    "store_bytes": "no store sample one window (plus a prune interval) into the soak: soak "
                   "longer than --retain",
}


def _reach(f: dict[str, Any]) -> float | None:
    """Promotions whose reach was measured (searches followed on both replicas) and that
    did not reach both within 3 s; None when none was measured."""
    measured = [x for x in f["detail"]["promotions"] if x["measured"]]
    return float(sum(not x["reached_both"] for x in measured)) if measured else None


def goal_values(f: dict[str, Any]) -> dict[str, tuple[float | None, str, float, str]]:
    """Per goal: (measured, op, target, what the ratio is); measured None: it could not
    be (:data:`UNMEASURED` says why)."""
    growth = held_growth(f["rss_growth"])
    judge_gap = f["judge_answered"] - f["ledger_paid"]
    rec = f["detail"]["searches"]
    return {
        "lost": (float(rec["answered_not_logged"] - f["searches_dropped_said"]), "==", 0.0,
                 "answered searches not in the store - dropped said"),
        "unanswered": (float(rec["logged_not_answered"] - rec["logged_not_answered_at_kill"]),
                       "==", 0.0, "logged searches never answered, but for those in flight "
                       "at the kill"),
        "errors": (float(f["errors_other_replica"]), "==", 0.0, "errors on replica a"),
        "searches": (float(f["searches_answered"] - f["searches_logged"]
                           - f["searches_dropped_said"]), "==", 0.0,
                     "answered - (logged + dropped said)"),
        "clicks": (float(f["clicks_sent"] - f["clicks_stored"]), "==", 0.0,
                   "clicks sent - stored"),
        "paid": (float(f["loop_paid"] - f["ledger_paid"]), "==", 0.0,
                 "/v1/loop paid - ledger paid"),
        "judge_gap": (float(judge_gap) if judge_gap >= 0 else float("inf"), "<=",
                      float(JUDGE_BATCH), "judge answered - ledger paid (one batch)"),
        "reach": (_reach(f), "==", 0.0,
                  "promotions not on both replicas within 3 s (of those searches followed)"),
        "refused": (float(f["refused_versions_served"]), "==", 0.0,
                    "answers by a never-promoted version"),
        "p99": (_ratio(f["p99_during_promotion_ms"], f["p99_quiet_ms"]),
                "<=", 3.0, "p99 during promotion / quiet"),
        "rss": (max(growth) if growth else None, "<=", 0.10,
                "largest RSS growth after the first minutes (PostgreSQL: its backends' "
                "private memory; its buffer cache apart)"),
        "ndcg_new": (_diff(f["served_ndcg10_new"]), ">=", NEW_GAIN,
                     "served nDCG@10 end - raw, held-back questions"),
        "ndcg_new_p": (f["served_ndcg10_new"].get("p"), "<=", 0.0499,
                       "paired p of that gain (two-sided sign flip; goal < 0.05)"),
        "ndcg_asked": (_diff(f["served_ndcg10_asked"]), ">=", 0.0,
                       "served nDCG@10 end - raw, the 100 most asked questions"),
        "cycles": (_ratio(f["learner_cycle_s"]["last"],
                          f["learner_cycle_s"]["median_first_5min"]), "<=", 2.0,
                   "learner cycle: last / median of the first 5 minutes"),
        "learner_rss": (f["learner_rss_growth_after_budget"], "<=", 0.10,
                        "learner RSS growth from the budget spent to the end"),
        "p99_tail": (_ratio(f["p99_last_ms"], f["p99_first_ms"]), "<=", 1.5,
                     "p99 last third / first third (after minute 1, faults left out)"),
        **kept_goals(f),
    }


#: The held-back questions' goal: end >= raw + 0.010 with paired p < 0.05 (issue 62).
NEW_GAIN = 0.010


def _diff(x: dict[str, Any]) -> float | None:
    return None if x.get("raw") is None or x.get("end") is None else x["end"] - x["raw"]


def _ratio(a: float | None, b: float | None) -> float | None:
    ok = a is not None and b is not None and a == a and b == b and b > 0
    return a / b if ok else None  # type: ignore[operator]


def is_met(value: float | None, op: str, target: float) -> bool:
    if value is None:
        return False
    return value == target if op == "==" else value <= target if op == "<=" else \
        value >= target


def shown_goal(key: str, value: float | None, op: str, target: float) -> str:
    """A goal's value and verdict as printed: ``0.5 (goal <= 3) met``, ``... MISSED``, or
    ``n/a (why) (goal ...)`` for a value that could not be measured (never a miss)."""
    if value is None:
        return f"n/a ({UNMEASURED.get(key, 'not measured')}) (goal {op} {target:g})"
    return (f"{round(value, 4)} (goal {op} {target:g}) "
            f"{'met' if is_met(value, op, target) else 'MISSED'}")


def goals(f: dict[str, Any]) -> bool:
    """Print each goal as met, MISSED or n/a (why), with its measured value; none missed?
    (a goal that could not be measured is not a miss: its line says why)"""
    from claims import Goal, emit

    ok = True
    claims: dict[str, Goal] = {}
    measured: dict[str, float | None] = {}
    for key, (value, op, target, what) in goal_values(f).items():
        ok &= value is None or is_met(value, op, target)
        print(f"goal {key}: {what} = {shown_goal(key, value, op, target)}", flush=True)
        claims[key] = Goal(f"soak: {what}", op, target)
        measured[key] = value
    emit(claims, measured, f"{f['minutes']:g} min")
    return ok


# -- the markdown and the PNG ------------------------------------------------------------------------
KEYS = ("minutes", "capacity_qps", "offered_qps", "achieved_qps", "searches_answered",
        "errors_other_replica", "errors_killed_window", "searches_logged",
        "searches_dropped_said", "clicks_sent", "clicks_stored", "judge_answered",
        "ledger_paid", "loop_paid", "promotions", "promotions_reached_both",
        "promotions_unmeasured", "refused_versions_served", "p99_quiet_ms",
        "p99_during_promotion_ms", "p99_first_ms", "p99_last_ms", "served_ndcg10_raw",
        "served_ndcg10_end", "served_ndcg10_raw_stream", "served_ndcg10_end_stream",
        "served_ndcg10_new", "served_ndcg10_asked", "learner_cycle_s",
        "learner_rss_growth_after_budget")


#: ``--retain``'s keys (issue 76), in the report when the run had them.
RETENTION_KEYS = ("store_bytes", "store_rows", "pruned_rows", "versions_kept",
                  "versions_kept_by_reason", "version_bytes")


def write_report(json_path: Path, f: dict[str, Any], load: str) -> None:
    """``OUT.md`` (the keys, the goals, the faults) and ``OUT.png`` beside ``OUT``."""
    md, png = json_path.with_suffix(".md"), json_path.with_suffix(".png")
    lines = [f"# Soak run: {f['minutes']:g} minutes", "", f"Machine load: {load}", "",
             "| key | value |", "|---|---|"]
    lines += [f"| `{k}` | {f[k]} |" for k in KEYS]
    lines += [f"| `rss_growth` | {json.dumps(f['rss_growth'])} |"]
    lines += [f"| `{k}` | {json.dumps(f[k])} |" for k in RETENTION_KEYS if k in f]
    lines += ["", "## Goals", ""]
    for key, (value, op, target, what) in goal_values(f).items():
        lines.append(f"- {what}: {shown_goal(key, value, op, target)}")
    lines += ["", "## Faults and promotions", ""]
    t0 = f["timeline"]["t0"]
    lines += [f"- {e['time'] - t0:7.1f} s {e['event']}" + (
        f" (planned at {e['planned_s']:.0f} s; the fault before it took longer)"
        if e.get("planned_s") is not None and e["time"] - t0 > e["planned_s"] + 2 else "")
        for e in f["detail"]["faults"]]
    lines += [f"- {x['time'] - t0:7.1f} s {x['action']} {x['version']} by {x['by']}: " + (
              "seen after " + json.dumps({k: None if v is None else round(v, 2)
                                          for k, v in x['seen_after_s'].items()}) + " s"
              if x["measured"] else x["reason"]) for x in f["detail"]["promotions"]]
    lines += ["", f"![timeline]({png.name})", ""]
    md.write_text("\n".join(lines) + "\n")
    plot(png, f)


def plot(png: Path, f: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = f["timeline"]
    t0 = tl["t0"]
    fig, ax = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    for rep_name, ws in tl["windows"].items():
        t = [w["t"] for w in ws]
        ax[0].plot(t, [w["p50_ms"] for w in ws], label=f"{rep_name} p50")
        ax[0].plot(t, [w["p99_ms"] for w in ws], "--", label=f"{rep_name} p99")
        ax[1].plot(t, [w["answered"] / WINDOW_S for w in ws], label=f"replica {rep_name}")
    for rep_name in ("a", "b"):
        pts = [(t - t0, version_number(v)) for t, r, v, _ in tl["loops"] if r == rep_name]
        ax[2].step([x for x, _ in pts], [y for _, y in pts], where="post",
                   label=f"replica {rep_name}")
    for name, samples in tl["rss"].items():
        ax[3].plot([t - t0 for t, _ in samples], [v for _, v in samples], label=name)
    for i, e in enumerate(f["detail"]["faults"]):
        for a in ax:
            a.axvline(e["time"] - t0, color="grey", lw=0.6, alpha=0.6)
        # staggered heights: labels of faults seconds apart do not print over each other
        ax[0].annotate(e["event"], (e["time"] - t0, 1.0 - 0.22 * (i % 4)),
                       xycoords=("data", "axes fraction"), rotation=90, fontsize=6,
                       va="top", ha="right", color="grey")
    ax[0].set_yscale("log")
    titles = ("search latency per 10 s window (ms)", "searches answered / s",
              "served version (0 = raw)", "RSS (MB)")
    for a, title in zip(ax, titles):
        a.set_title(title, fontsize=10)
        a.legend(fontsize=7, ncol=4)
    ax[3].set_xlabel("seconds into the soak (grey: faults)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
