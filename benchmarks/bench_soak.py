"""The whole closed loop under sustained traffic, with faults: one soak run.

    python benchmarks/bench_soak.py [--data ../shared/data/scifact] [--minutes 20]
        [--json soak.json] [--docs N] [--work-dir ~/.cache/tttembed-bench]

Everything runs on 127.0.0.1 and is stopped at the end: PostgreSQL (tests/pg.py: the
registry and the feedback store in one database), two ``tttembed serve --registry URL``
replicas of the same index (a and b), the learner (``tttembed loop``, judge, audit on
the folder's labels) and the judge, ``examples/rerank_server.py`` answering from the
folder's labels (train and test) and counting the pairs it answered in a file.

Load: wrk with ``benchmarks/soak.lua``, one wrk per replica, one connection per thread:
searches drawn Zipf(1) over the folder's train questions (the test questions are kept
for the replay), clicks posted to ``/v1/events`` after 30% of searches from a
position-based model, explicit labels on ``/v1/feedback`` after 2%. First the capacity:
wrk unpaced for ``--capacity-s`` (both replicas at once, searches answered per second);
then the soak at ``--load`` (0.5) of it for ``--minutes``, paced by the script's
``delay()`` (each thread takes the next free slot of its share of the rate: Debian's wrk
has no fixed-rate mode, wrk2's ``-R``).

Faults on a schedule printed at the start (fractions of the soak): a promotion by CLI
(a registered, never-learned version), ``kill -9`` of replica b (restarted 10 s later),
a PostgreSQL restart, the judge down 60 s then answering 500 for 30 s, a rollback by CLI.
After the soak, ``/v1/loop`` and the books (the spend account, the learner's ledger, the
judge's count) are read once the learner has stopped paying (it goes on after the traffic:
pending pairs, a cycle's validation pairs), so a pair paid between two reads is not a gap
(:func:`_soak_report.settled_books`; ``detail.judge.books_settled`` says whether they were).
The JSON keys are the issue's (see :mod:`_soak_report`); a markdown and a PNG are written
beside it (latency p50/p99 and throughput per 10 s window per replica, the version each
serves, the memory of every process: RSS; PostgreSQL's as its backends' private memory
plus its shared buffers once). The goals are printed as met or missed, each with its
measured value, or as "n/a (why)" when this run could not measure it (too short, no
promotion followed by traffic: not a miss), and the exit status is 1 when one is missed. ``--docs N`` soaks a subset
(the judged documents first), ``--index`` reuses a built index (the CI variant in
``tests/test_benchmarks.py`` runs one minute on the tiny demo).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _soak_report as rep  # noqa: E402
from _loop_support import CHILDREN  # noqa: E402
from _soak_setup import Ports, Stack, Task, prepare_task, start_wrk, write_lua_data  # noqa: E402
from _soak_store import StoreWatch  # noqa: E402
from _support import DATA, ROOT, cli, proc_status, write_json  # noqa: E402

FAULTS = (  # (fraction of the soak, what)
    (0.12, "promote"), (0.24, "kill_b"), (0.40, "pg_restart"), (0.55, "judge_down"),
    (0.80, "rollback"))


class Sampler(threading.Thread):
    """Every second: each replica's ``/v1/loop`` (what it serves); every 5 s the RSS of
    every process."""

    def __init__(self, stack: Stack, extra: dict[str, Any],
                 watch: StoreWatch | None = None) -> None:
        super().__init__(daemon=True)
        self.stack, self.extra = stack, extra
        #: the store's bytes and every search id it held (retention prunes the older)
        self.watch = watch or StoreWatch(stack.url)
        self.loops: list[tuple[float, str, str | None, int]] = []
        self.rss: dict[str, list[tuple[float, float]]] = {}
        #: every 5 s, each process's CPU seconds so far (user + system; PostgreSQL's with
        #: its backends'): who takes the cores as the run goes on
        self.cpu: dict[str, list[tuple[float, float]]] = {}
        self.pairs: list[tuple[float, int, int]] = []  # /v1/loop: (time, paid, budget)
        self.postmasters: list[int] = []  # PostgreSQL's instances: a restart is a new one
        self.halt = threading.Event()

    def run(self) -> None:
        import httpx

        n = 0
        with httpx.Client(timeout=5) as http:
            while not self.halt.wait(1.0):
                for name in ("a", "b"):
                    try:
                        s = http.get(self.stack.procs[name].url + "/v1/loop").json()
                        serving = s.get("serving") or {}
                        self.loops.append((time.time(), name, serving.get("version"),
                                           int(serving.get("unlogged") or 0)))
                        self.pairs.append((time.time(), int(s.get("pairs_judged") or 0),
                                           int(s.get("judge_budget") or 0)))
                    except Exception:  # noqa: BLE001  (a replica down: a gap)
                        pass
                n += 1
                if n % 5 == 0:
                    self.sample_rss()
                if self.watch.due():
                    self.watch.sample()

    def sample_rss(self) -> None:
        now = time.time()
        procs = {f"{p.name}#{len(p.pids)}": p.pid for p in self.stack.procs.values()}
        procs.update({k: (v.pid if v.poll() is None else None) for k, v in self.extra.items()})
        for name, pid in procs.items():
            if pid is not None:
                self.rss.setdefault(name, []).append((now, proc_status("VmRSS", pid) / 1024))
                self.cpu.setdefault(name, []).append((now, cpu_seconds([pid])))
        pg = postmaster_pid(self.stack)
        if pg is not None:  # private memory (a leak shows here) and the buffer cache apart,
            if pg not in self.postmasters:  # per instance, as a restarted replica's
                self.postmasters.append(pg)
            private, shared = tree_rss(pg)
            life = f"#{self.postmasters.index(pg) + 1}"
            self.cpu.setdefault("postgres" + life, []).append(
                (now, cpu_seconds([pg, *children(pg)], waited=pg)))
            self.rss.setdefault("postgres" + life, []).append((now, private / 1024))
            self.rss.setdefault(rep.PG_SHARED + life, []).append((now, shared / 1024))


def postmaster_pid(stack: Stack) -> int | None:
    try:
        return int((Path(stack.db.root) / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_seconds(pids: list[int], waited: int | None = None) -> float:
    """The CPU seconds (user + system) ``pids`` have used, and the children ``waited``
    has reaped (PostgreSQL's ended backends); a process gone counts 0."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if pid == waited else 0)
    return total / tick


def tree_rss(pid: int) -> tuple[float, float]:
    """Memory (KiB) of ``pid`` and its children (PostgreSQL's backends): (their private
    memory, ``RssAnon`` summed; the shared memory they map, ``RssShmem``, once, as the
    largest any of them maps). A sum of RSS would count the shared buffers once per
    backend and grow as each backend touches more of them; the shared part grows as the
    buffer cache fills with the growing tables, up to ``shared_buffers``, and is reported
    apart from the private part, where a leak would show."""
    pids = [pid, *children(pid)]
    anon = [proc_status("RssAnon", p) for p in pids]
    shmem = [proc_status("RssShmem", p) for p in pids]
    return sum(a for a in anon if a == a), max((m for m in shmem if m == m), default=0.0)


# -- the faults ---------------------------------------------------------------------------------
def run_cli(stack: Stack, *args: str) -> str:
    import subprocess

    done = subprocess.run(cli(*args), capture_output=True, text=True, env=stack.env(),
                          timeout=300)
    if done.returncode != 0:
        return f"FAILED ({done.returncode}): {done.stderr.strip()[-300:]}"
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "ok"


def manual_version(stack: Stack) -> str:
    """A version registered by hand (a tiny task-wise vector: serving it changes almost
    nothing), for the CLI promotion."""
    import numpy as np

    from tttembed.adapt.state import AdaptState
    from tttembed.index.store import load_index

    index = load_index(stack.task.index)
    v = np.random.default_rng(5).normal(size=(1, index.dim)).astype(np.float32)
    v *= 0.01 / float(np.linalg.norm(v))
    st = AdaptState("task", (stack.task.name,), v, np.array([0.5]), np.array([10]),
                    identity=index.identity, dim=index.dim,
                    corpus_fingerprint=str(index.manifest.get("corpus_fingerprint", "")),
                    scorer="soak")
    path = st.save(stack.work / "manual.npz")
    said = run_cli(stack, "states", "add", stack.url, str(path))
    import re

    m = re.search(r"\bv\d+\b", said)
    if m is None:
        raise SystemExit(f"states add: {said}")
    return m.group(0)


def do_fault(what: str, stack: Stack, scale: float, events: list[dict[str, Any]],
             manual: str, planned: float | None = None) -> None:
    first = len(events)

    def mark(name: str, **kw: Any) -> None:  # the fault's first event carries its plan
        events.append({"event": name, "time": time.time(),
                       "planned_s": planned if len(events) == first else None, **kw})
        print(f"  {time.strftime('%H:%M:%S')} {name} {kw if kw else ''}", flush=True)

    if what == "promote":
        mark("promote_cli", version=manual, said=run_cli(stack, "states", "promote",
                                                        stack.url, manual))
    elif what == "rollback":
        mark("rollback_cli", said=run_cli(stack, "states", "rollback", stack.url))
    elif what == "kill_b":
        b = stack.procs["b"]
        mark("kill_b", pid=b.pid)
        b.kill(signal.SIGKILL)
        time.sleep(10)
        mark("restart_b")
        b.start()
        mark("b_healthy", pid=b.pid)
    elif what == "pg_restart":
        mark("pg_stop")
        stack.db.stop("fast")
        time.sleep(5)
        stack.db.start()
        mark("pg_started")
    elif what == "judge_down":
        mark("judge_down")
        stack.procs["judge"].stop()
        time.sleep(60 * scale)
        stack.restart_judge(fail_for=30 * scale)
        mark("judge_up_failing", seconds=round(30 * scale, 1))
        time.sleep(30 * scale)
        mark("judge_answering")


def schedule(seconds: float, scale: float) -> list[tuple[float, str]]:
    out = [(f * seconds, w) for f, w in FAULTS]
    print("fault schedule (seconds into the soak): " + ", ".join(
        f"{t:.0f} s {w}" for t, w in out) + f"; judge down {60 * scale:.0f} s then 500 for "
        f"{30 * scale:.0f} s; b restarted 10 s after its kill; PostgreSQL down 5 s",
        flush=True)
    return out


# -- phases ------------------------------------------------------------------------------------
def wrk_phase(stack: Stack, work: Path, tag: str, seconds: float, rate: float, threads: int,
              data: Path, stop_at: float = 0.0) -> dict[str, Any]:
    procs = {}
    for i, name in enumerate(("a", "b")):
        procs[name] = start_wrk(stack.procs[name].url, threads, seconds, work / f"wrk-{tag}-{name}",
                                data, rate / 2, seed=i + (7 if tag == "soak" else 0),
                                replica=f"{tag}{name}", stop_at=stop_at)
    return procs


def capacity(stack: Stack, work: Path, seconds: float, threads: int, data: Path
             ) -> tuple[float, list[rep.Row], dict[str, int]]:
    t0 = time.time()  # no new search after `seconds`: those in flight are answered
    procs = wrk_phase(stack, work, "cap", seconds + 5, 0.0, threads, data, stop_at=t0 + seconds)
    for proc in procs.values():
        proc.wait()
    rows, errors = [], {}
    for name in ("a", "b"):
        r, e = rep.read_logs(work / f"wrk-cap-{name}", name)
        rows += r
        errors[name] = rep.socket_errors(e)
    ok = [r for r in rows if r.kind == "search" and r.status == 200 and r.sent >= t0 + 2]
    span = max(r.done for r in ok) - (t0 + 2) if ok else math.nan  # the first 2 s: warm-up
    return len(ok) / span, rows, errors


def replay(url: str, task: Task, qids: list[str], name: str
           ) -> tuple[dict[str, float], dict[str, int]]:
    """nDCG@10 per question of ``qids`` searched once each on ``url`` as task ``name``
    (``_``: raw), and the versions that served."""
    import httpx

    from tttembed.metrics.ranking import per_query_metric

    run: dict[str, dict[str, float]] = {}
    versions: dict[str, int] = {}
    with httpx.Client(timeout=60) as http:
        for qid in qids:
            body = http.post(url + "/v1/search", json={"query": task.questions[qid],
                                                       "task": name, "k": 10}).json()
            hit = body["data"][0]
            run[qid] = {d: float(s) for d, s in zip(hit["ids"], hit["scores"])}
            v = str(body.get("version") or "raw")
            versions[v] = versions.get(v, 0) + 1
    qrels = {q: task.qrels[q] for q in qids}
    per = per_query_metric(qrels, run, "ndcg@10")
    return {q: float(per.get(q, 0.0)) for q in qids}, versions


def wait_following(stack: Stack, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [httpx.get(stack.procs[n].url + "/v1/loop", timeout=30).json() for n in "ab"]
        if all(g.get("version") == (g.get("serving") or {}).get("version") for g in got):
            return
        time.sleep(0.5)


def soak(stack: Stack, args: argparse.Namespace, work: Path, data: Path, offered: float,
         sampler: Sampler) -> dict[str, Any]:
    seconds = args.minutes * 60
    scale = min(1.0, seconds / 1200)
    plan = schedule(seconds, scale)
    manual = manual_version(stack)
    events: list[dict[str, Any]] = []
    t0 = time.time()
    procs = wrk_phase(stack, work, "soak", seconds + args.drain_s, offered, args.threads, data,
                      stop_at=t0 + seconds)
    sampler.extra.update({f"wrk-{k}": v for k, v in procs.items()})
    for at, what in plan:
        late = time.time() - (t0 + at)
        time.sleep(max(0.0, -late))
        if late > 2:  # the fault before took longer than the gap the schedule left
            print(f"  {what} {late:.0f} s after its planned {at:.0f} s (the fault before it "
                  "took longer)", flush=True)
        do_fault(what, stack, scale, events, manual, planned=round(at, 1))
        for line in stack.check_alive():
            print(f"  ! {line}", flush=True)
    for proc in procs.values():
        proc.wait()
    return {"t0": t0, "t1": t0 + seconds, "events": events, "manual": manual}


def measure(args: argparse.Namespace, work: Path, db: Any, ports: Ports) -> dict[str, Any]:
    import httpx

    task = prepare_task(Path(args.data), args.docs, Path(args.work_dir).expanduser(),
                        args.index)
    data = work / "soak-data.lua"
    write_lua_data(task, data, args.seed)
    budget = args.budget or int(args.rpm * args.minutes)
    stack = Stack(task, work, db, budget, args.learn_every, args.rpm, args.settle_s,
                  ports=ports, retention=retention_argv(args))
    print(f"task {task.name}: {len(task.stream)} stream questions (Zipf), {len(task.test)} "
          f"test questions replayed; index {task.index}; judge budget {budget} pairs at "
          f"{args.rpm:g}/min", flush=True)
    stack.start()
    if args.profile is not None:
        profile(stack, args.profile, args.capacity_s + args.minutes * 60, args.capacity_s)
    sampler = Sampler(stack, {}, StoreWatch(stack.url, watch_every(args)))
    try:
        sampler.start()
        cap, cap_rows, cap_err = capacity(stack, work, args.capacity_s, args.threads, data)
        offered = args.load * cap
        print(f"capacity {cap:.1f} searches/s (both replicas, {args.threads} connections "
              f"each, unpaced); soak at {offered:.1f}/s for {args.minutes:g} min", flush=True)
        run = soak(stack, args, work, data, offered, sampler)
        time.sleep(2)
        final, got, settled = rep.settled_books(  # the learner may still be paying
            lambda: [httpx.get(stack.procs[n].url + "/v1/loop", timeout=30).json()
                     for n in "ab"],
            lambda: rep.counts(stack.url, work / "learner-cache" / "ledger.sqlite",
                               work / "judge-pairs.txt", seen=sampler.watch.ids))
        got["settled"] = settled
        sampler.halt.set()
        wait_following(stack)
        end, end_versions = rep_ndcg(stack, task, task.name)
        raw, raw_versions = rep_ndcg(stack, task, "_")
        from tttembed.registry.open import open_registry

        reg = open_registry(stack.url, cache=work / "bench-registry-cache")
        history = reg.survey().history
        kept = store_figures(args, sampler, stack, reg, run)
        reg.close()
        return {"task": task, "stack": stack, "cap": cap, "offered": offered, "run": run,
                "final": final, "counts": got, "history": history, "kept": kept,
                "ndcg": (raw, raw_versions, end, end_versions), "cap_rows": cap_rows,
                "cap_errors": cap_err, "sampler": sampler}
    finally:
        sampler.halt.set()
        stack.stop_all()


def retention_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """``--retain`` and ``--keep-versions`` for the replicas and the learner."""
    out: tuple[str, ...] = ()
    if args.retain:
        out += ("--retain", args.retain)
    if args.keep_versions:
        out += ("--keep-versions", str(args.keep_versions))
    return out


def watch_every(args: argparse.Namespace) -> float:
    """Seconds between the store's samples: 30, or a quarter of a shorter window."""
    from _soak_store import EVERY_S

    from tttembed.loop.retention import parse_duration

    return min(EVERY_S, parse_duration(args.retain) / 4) if args.retain else EVERY_S


def store_figures(args: argparse.Namespace, sampler: Sampler, stack: Stack, reg: Any,
                  run: dict[str, Any]) -> dict[str, Any]:
    """With ``--retain``: the issue's keys (:func:`_soak_store.figures`); else none."""
    if not args.retain:
        return {}
    from _soak_store import figures as kept_figures

    from tttembed.loop.retention import Retention

    kept = Retention.parse(args.retain, args.keep_versions or 20)
    sampler.watch.sample()
    return kept_figures(sampler.watch, stack.url, reg, run["t0"], run["t1"], kept.retain_s,
                        kept.keep_versions, kept.interval_s)


def profile(stack: Stack, out: Path, seconds: float, warm: float = 0.0) -> None:
    """py-spy (a sampling profiler: pip install py-spy) on the learner and both replicas,
    non-blocking, 20 samples/s, collapsed stacks (one line per stack with its count),
    over two windows of the run's ``seconds`` (the first ``warm`` of them a warm-up),
    each a third of the rest and at most 8 minutes: the early one from the end of the
    warm-up into ``out``/early-NAME.txt, the late one up to the end into
    ``out``/late-NAME.txt (what grows between them is what a climbing tail costs); a
    replica restarted by the faults is not followed."""
    import shutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    span = min(480.0, (seconds - warm) / 3)
    for name in ("learner", "a", "b"):
        pid = stack.procs[name].pid
        if pid is None:
            continue
        for when, delay in (("early", warm), ("late", seconds - span)):
            cmd = [spy, "record", "-p", str(pid), "-r", "20", "--nonblocking", "-d",
                   str(int(span)), "-f", "raw", "-o", str(out / f"{when}-{name}.txt")]
            CHILDREN.start(["sh", "-c", f'sleep {int(delay)} && exec "$0" "$@"', *cmd],
                           out / f"{when}-{name}.log", dict(os.environ))


def rep_ndcg(stack: Stack, task: Task, name: str
             ) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """nDCG@10 per question on the test questions (new to the traffic) and on the stream's
    100 most asked (in-sample), as replica a serves them now to task ``name`` (``_``:
    raw)."""
    url = stack.procs["a"].url
    test, tv = replay(url, task, task.test, name)
    stream, sv = replay(url, task, task.head, name)
    return {"test": test, "stream": stream}, {"test": tv, "stream": sv}


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: the run stops, and every child with it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop_on_signal(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def replay_questions(data: Path) -> int:
    """How many questions the replay would ask: those of ``qrels/test.tsv`` judged
    relevant that ``queries.jsonl`` holds (as :func:`_soak_setup.prepare_task` picks)."""
    from _soak_setup import read_qrels

    path = data / "qrels" / "test.tsv"
    if not path.is_file():
        return 0
    judged = {q for q, gs in read_qrels(path).items() if any(g > 0 for g in gs.values())}
    if not judged:
        return 0
    with open(data / "queries.jsonl", encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip() and json.loads(line)["_id"] in judged)


def check_args(args: argparse.Namespace) -> str:
    """What is wrong with the command line, as one line with the fix ('' when nothing)."""
    import shutil

    data = Path(args.data)
    for name, value, low in (("--minutes", args.minutes, 0.0), ("--load", args.load, 0.0),
                             ("--capacity-s", args.capacity_s, 0.0)):
        if not value > low or not math.isfinite(value):
            return f"{name} {value:g}: give a number above {low:g}"
    if args.load > 1.0:
        return f"--load {args.load:g}: give a share of the capacity in (0, 1]"
    if args.threads < 1:
        return f"--threads {args.threads}: give 1 or more connections per replica"
    for name, value, low in (("--budget", args.budget, 0), ("--docs", args.docs, 0),
                             ("--settle-s", args.settle_s, 0.0),
                             ("--drain-s", args.drain_s, 0.0)):
        if not value >= low or not math.isfinite(value):
            return f"{name} {value:g}: give a number >= {low:g}"
    if not args.rpm > 0 or not math.isfinite(args.rpm):
        return f"--rpm {args.rpm:g}: give the judge's pairs per minute, above 0"
    if args.learn_every < 1:
        return f"--learn-every {args.learn_every}: give 1 or more rewarded pairs"
    if not (data / "queries.jsonl").is_file() or not (data / "corpus.jsonl").is_file():
        return (f"--data {data}: not a BEIR folder (no queries.jsonl and corpus.jsonl); give "
                "one, e.g. --data ../shared/data/scifact (BEIR's scifact.zip unpacked)")
    if not any((data / "qrels" / f"{s}.tsv").is_file() for s in ("train", "test")):
        return f"--data {data}: no qrels/train.tsv or qrels/test.tsv; the judge needs labels"
    try:
        replayed = replay_questions(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return (f"--data {data}: its queries.jsonl or qrels/test.tsv cannot be read "
                f"({type(exc).__name__}: {exc}); fix the folder")
    if not replayed:
        return (f"--data {data}: no test question (qrels/test.tsv judging a question of "
                "queries.jsonl relevant): the replay needs them; split one with "
                "benchmarks/split_by_text.py")
    if shutil.which("wrk") is None:
        return "wrk is not installed: apt-get install -y wrk"
    return check_retention(args)


def check_retention(args: argparse.Namespace) -> str:
    """``--retain`` and ``--keep-versions`` as the tool reads them ('' when fine)."""
    from tttembed.core.errors import ConfigError
    from tttembed.loop.retention import Retention

    if args.keep_versions and not args.retain:
        return "--keep-versions needs --retain (the window the soak's goals are about)"
    if args.retain:
        try:
            Retention.parse(args.retain, args.keep_versions or 20).check(args.settle_s)
        except ConfigError as exc:
            return str(exc)
    return ""


def parser() -> argparse.ArgumentParser:
    """The command line (every option with its help)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA / "scifact"), help="a BEIR folder")
    ap.add_argument("--minutes", type=float, default=20.0, help="the soak's length")
    ap.add_argument("--json", type=Path, help="the report (a .md and a .png beside it)")
    ap.add_argument("--docs", type=int, default=0, help="a subset of the corpus: its judged "
                    "documents first (0: all)")
    ap.add_argument("--work-dir", default="~/.cache/tttembed-bench",
                    help="where the index is built once and reused")
    ap.add_argument("--index", type=Path, help="the folder's index (default: built once "
                    "into --work-dir)")
    ap.add_argument("--capacity-s", type=float, default=60.0, help="seconds of the "
                    "capacity phase (wrk unpaced on both replicas) before the soak")
    ap.add_argument("--load", type=float, default=0.5, help="the soak's search rate as a "
                    "share of the measured capacity, in (0, 1]")
    ap.add_argument("--threads", type=int, default=4, help="wrk threads per replica, one "
                    "connection each (1 or more)")
    ap.add_argument("--rpm", type=float, default=240.0, help="the learner's judge pairs/min")
    ap.add_argument("--budget", type=int, default=0, help="judge pairs (0: rpm x minutes)")
    ap.add_argument("--learn-every", type=int, default=200, help="the learner's "
                    "--learn-every: a learning cycle after this many new rewarded pairs")
    ap.add_argument("--settle-s", type=float, default=60.0, help="--click-settle-s")
    ap.add_argument("--drain-s", type=float, default=15.0, help="after the soak: follow-ups "
                    "still queued are posted")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the traffic's Zipf "
                    "order over the questions (wrk's data file)")
    ap.add_argument("--keep", type=Path, help="keep the run's folder (logs) here")
    ap.add_argument("--profile", type=Path, help="py-spy the learner and the replicas into "
                    "this folder (collapsed stacks; needs pip install py-spy)")
    ap.add_argument("--retain", default="", help="the replicas' and the learner's "
                    "--retain (e.g. 5m: a window that turns over several times in the run); "
                    "adds store_bytes, store_rows, versions_kept and pruned_rows to the "
                    "JSON and their goals (default: the tool's default, 7d)")
    ap.add_argument("--keep-versions", type=int, default=0, help="with --retain: the "
                    "replicas' and the learner's --keep-versions (0: the tool's, 20)")
    ap.add_argument("--ports", default="", help="LO-HI: the TCP ports PostgreSQL, the "
                    "judge and the replicas listen on (default: any free ones)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import shutil
    import tempfile

    bad = check_args(args)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    ports = Ports(args.ports)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGINT, _stop_on_signal)
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    sys.path.insert(0, str(ROOT))
    import tests.pg as pg

    if args.ports:
        pg.free_port = ports.take  # PostgreSQL's port from the range too
    try:
        with pg.postgres_instance(work) as db:
            got = measure(args, work, db, ports)
            figures = rep.figures(got, args)
    except Interrupted as exc:
        print(f"error: stopped by {exc} before the end; every process it started is "
              "stopped, no report written", file=sys.stderr)
        return 128 + exc.signum
    except BaseException as exc:  # noqa: BLE001  (pytest.skip: no PostgreSQL here)
        if type(exc).__name__ == "Skipped":
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C: the stop goes on
            signal.signal(sig, signal.SIG_IGN)
        CHILDREN.stop_all()
        if args.keep is not None:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    load = "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    figures["load"] = load
    print(f"machine {load} (1, 5, 15 min)")
    ok = rep.goals(figures)
    if args.json is not None:
        write_json(args.json, rep.strict(figures))
        rep.write_report(args.json, figures, load)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
