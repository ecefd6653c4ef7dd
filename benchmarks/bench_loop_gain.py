"""The closed loop's gain against a real ``tttembed serve --registry DIR --learn`` on 127.0.0.1.

    python benchmarks/bench_loop_gain.py DATA --index I [--windows 5 --head 60 --tail 20]

A BEIR task's judged test queries are replayed as traffic, in windows: each window sends
the same ``--head`` queries (head queries recur) and ``--tail`` fresh ones, as
single-query ``POST /v1/search`` calls (k = 10) from ``--clients`` threads. The judge is
the loopback rerank server of ``tests/servers.py`` in Cohere's wire shape
(``POST /v1/rerank``): a (query, document) pair scores 1 when the task's qrels grade it
> 0, else 0, plus Gaussian noise of ``--sigma`` drawn anew at each scoring (the drift
audit's re-scores see fresh noise), clipped to [0, 1]. The judge budget is
``--budget-per-query`` pairs times the distinct queries of the whole replay. After each
window the benchmark waits until ``GET /v1/loop`` says the learner is idle (for
``--settle`` s) and prints a row: served version, served
nDCG@10 of the window's queries (from the ids the server returned and the qrels), judge
pairs so far, p50/p99 latency, failed requests, and for each promotion the time from its
registration to the first response carrying it. A prober thread sends one head query
every ``1 / --probe-rps`` s from the end of window 1's burst on, each labelled by the
learner's state when it was sent (``/v1/loop`` polled every 0.2 s); probes sent during a
window's burst are left out. Its p99 while a cycle runs is compared with its p99 while
the loop is idle (``--idle-s`` of idle probing follow each window). Every probe does the
same work: the head texts' vectors are in the server's cache by then (state lookup,
index search, traffic log); with ``--cache-size 0`` every request runs the model too.
Then one pass of the head queries alone records what is served when the judge turns
(the reference of goal 2), ``--adversarial`` windows run with the judge inverted
(1 - r), one window with it restored, and ``tttembed states rollback DIR`` (the CLI) is
run: the server must pick it up.

Goals (the closed-loop issue), measured in this run:

1. served nDCG@10 of the head queries in the last normal window above the first: paired
   sign-flip test over the head queries, p < 0.05 (sigma 0.2, <= 10 judge pairs per
   distinct query);
2. the inverted judge never lowers the served nDCG@10 of the head queries by more than
   0.01 (against the reference pass; frozen or refused);
3. p99 of /v1/search while a cycle runs <= 1.5x the idle p99; 0 failed requests; every
   promotion (and the rollback) visible within 10 s of its registration.

Goal 2 needs judge budget left when the judge turns: when no pair was scored inverted
the run says so and exits 1. With the defaults, SciFact and Cranfield have budget left
then (the judge pays at most 10 pairs of a query's lists and new queries first; the
validation pays a tenth of the pairs new since the last cycle); CISI's 76 judged queries
make too small a replay (budget spent by window 5): ``--budget-per-query 20`` exercises
it there, goal 1's budget condition then not holding.

How many task states one server holds without slowing down is ``bench_loop_states.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _loop_support import (
    CHILDREN,
    Api,
    K,
    Poller,
    Sample,
    Server,
    TaskData,
    jsonable,
    load_data,
    parser,
    run,
    start_serve,
    wait_idle,
    wait_learner,
)
from _support import cli, loopback_servers, pct, write_json
from claims import Goal, check, emit

GOALS = {
    "gain_p": Goal("loop: head nDCG@10, last normal window > first, paired sign-flip p",
                   "<=", 0.05),
    "gain": Goal("loop: head nDCG@10 gain, last normal window - first", "info", None),
    "adv_drop": Goal("loop: largest head nDCG@10 drop under the inverted judge", "<=", 0.01),
    "p99_ratio": Goal("loop: /v1/search p99 while a cycle runs / idle p99", "<=", 1.5),
    "failed": Goal("loop: failed /v1/search requests", "==", 0.0),
    "visible": Goal("loop: slowest promotion or rollback, registration -> first response",
                    "<=", 10.0, " s"),
    "pairs_per_query": Goal("loop: judge budget per distinct query (goal 1's condition)",
                            "<=", 10.0),
    "paid_per_query": Goal("loop: judge pairs paid per distinct query", "info", None),
}
ADV_DROP = 0.01


@dataclass(frozen=True)
class Plan:
    head: list[str]
    tails: list[list[str]]          # one list per window (normal, adversarial, restored)
    phases: list[str]

    @property
    def distinct(self) -> int:
        return len(self.head) + sum(len(t) for t in self.tails)


def make_plan(qids: Sequence[str], windows: int, head: int, tail: int, adversarial: int,
              seed: int) -> Plan:
    """Head and per-window tail queries, shrunk to the judged queries there are."""
    n_windows = windows + adversarial + 1
    order = [qids[i] for i in np.random.default_rng(seed).permutation(len(qids))]
    if head + tail * n_windows > len(order):
        scale = len(order) / (head + tail * n_windows)
        tail = max(1, int(tail * scale))
        head = min(head, len(order) - tail * n_windows)
        print(f"note: {len(order)} judged queries: head {head}, tail {tail} a window "
              f"({n_windows} windows)")
    if head < 2:
        raise SystemExit("too few judged queries for this many windows")
    tails = [order[head + i * tail: head + (i + 1) * tail] for i in range(n_windows)]
    phases = ["normal"] * windows + ["adversarial"] * adversarial + ["restored"]
    return Plan(order[:head], tails, phases)



# -- the judge ------------------------------------------------------------------------------
class Judge:
    """Scores (query text, document text) from the qrels, noisy, optionally inverted."""

    def __init__(self, data: TaskData, sigma: float, seed: int) -> None:
        self.data = data
        self.sigma = sigma
        self.inverted = False
        self.pairs = 0
        self.inverted_pairs = 0
        self.unknown_queries = 0
        self._rng = np.random.default_rng(seed + 7)
        self._lock = threading.Lock()

    def __call__(self, query: str, documents: Sequence[str]) -> list[float]:
        rel = self.data.relevant_texts.get(query)
        base = np.array([1.0 if rel and d in rel else 0.0 for d in documents])
        with self._lock:
            noise = self._rng.normal(0.0, self.sigma, len(documents)) if self.sigma else 0.0
            inverted = self.inverted
            self.pairs += len(documents)
            self.inverted_pairs += len(documents) if inverted else 0
            self.unknown_queries += rel is None
        r = np.clip(base + noise, 0.0, 1.0)
        return (1.0 - r if inverted else r).tolist()




class Prober(threading.Thread):
    """One head query every ``1 / rps`` s for the whole run, labelled by the loop state."""

    def __init__(self, api: Api, poller: Poller, queries: list[tuple[str, str]],
                 rps: float, burst: threading.Event) -> None:
        super().__init__(daemon=True)
        self.api, self.poller, self.queries = api, poller, queries
        self.period = 1.0 / rps if rps > 0 else 0.0
        self.burst = burst
        self.samples: list[Sample] = []
        self.window = 0
        self.stop = threading.Event()

    def run(self) -> None:
        if not self.period:
            return
        i, tick = 0, time.monotonic()
        while not self.stop.is_set():
            qid, text = self.queries[i % len(self.queries)]
            self.samples.append(self.api.search(qid, text, "probe", self.window,
                                                self.poller.state, self.burst.is_set()))
            i += 1
            tick += self.period
            self.stop.wait(max(tick - time.monotonic(), 0.0))



# -- metrics ----------------------------------------------------------------------------------
def ndcg(data: TaskData, lists: dict[str, list[str]]) -> dict[str, float]:
    """Per-query nDCG@10 (trec_eval's, graded) of the served lists."""
    from tttembed.metrics.ranking import per_query_metric

    run = {q: {d: float(K - r) for r, d in enumerate(ids)} for q, ids in lists.items()}
    qrels = {q: data.qrels[q] for q in lists}
    return per_query_metric(qrels, run, f"ndcg@{K}") if lists else {}




def mean(xs: Sequence[float] | Any) -> float:
    vals = list(xs)
    return float(np.mean(vals)) if vals else float("nan")


def sign_flip(a: Sequence[float], b: Sequence[float], seed: int) -> float:
    """Two-sided paired sign-flip p of mean(a - b) = 0 (the library's test)."""
    from tttembed.metrics.stats import paired_randomization_test

    return float(paired_randomization_test(np.asarray(a), np.asarray(b), 20000, seed))


# -- the replay -------------------------------------------------------------------------------
@dataclass
class Window:
    n: int
    phase: str
    samples: list[Sample]
    start: float
    end: float            # the last response of the burst
    settled: float = 0.0  # the learner idle again (or the wait's timeout)
    idle: bool = True
    status: dict[str, Any] = field(default_factory=dict)


def send_window(api: Api, poller: Poller, pool: ThreadPoolExecutor, data: TaskData,
                qids: list[str], n: int, burst: threading.Event) -> list[Sample]:
    burst.set()
    try:
        futures = [pool.submit(api.search, q, data.queries[q], "window", n, poller.state,
                               True) for q in qids]
        return [f.result() for f in futures]
    finally:
        burst.clear()


def run_window(ctx: Replay, n: int, phase: str, qids: list[str]) -> Window:
    ctx.judge.inverted = phase == "adversarial"
    ctx.prober.window = n
    start = time.time()
    samples = send_window(ctx.api, ctx.poller, ctx.pool, ctx.data, qids, n, ctx.burst)
    if not ctx.prober.is_alive():  # every head text embedded once: probes are cache hits
        ctx.prober.start()
    end = max(s.done for s in samples)
    w = Window(n, phase, samples, start, end)
    w.idle = wait_idle(ctx.poller, end, ctx.args.idle_timeout, ctx.args.settle)
    w.settled = time.time()
    time.sleep(ctx.args.idle_s)  # idle probes (the reference for the cycle's latency)
    w.status = dict(ctx.poller.latest)
    return w


@dataclass
class Replay:
    args: argparse.Namespace
    data: TaskData
    plan: Plan
    judge: Judge
    api: Api
    poller: Poller
    prober: Prober
    pool: ThreadPoolExecutor
    burst: threading.Event
    server: Server
    windows: list[Window] = field(default_factory=list)
    extra: list[Sample] = field(default_factory=list)  # the rollback's own searches


def window_row(ctx: Replay, w: Window, promos: list[dict[str, Any]]) -> dict[str, Any]:
    head = set(ctx.plan.head)
    ok = [s for s in w.samples if s.ok]
    per_q = ndcg(ctx.data, {s.qid: s.ids for s in ok})
    lat = [s.latency for s in w.samples]
    mine = [p for p in promos if w.start <= p["time"] < (w.settled + ctx.args.idle_s)]
    st = w.status
    return {
        "window": w.n, "phase": w.phase, "served": st.get("version") or "raw",
        "versions_in_window": sorted({s.version or "raw" for s in ok}),
        "ndcg": mean(per_q.values()),
        "ndcg_head": mean(v for q, v in per_q.items() if q in head),
        "ndcg_tail": mean(v for q, v in per_q.items() if q not in head),
        "per_query": per_q, "pairs_judged": st.get("pairs_judged"),
        "budget_left": st.get("judge_budget_left"), "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99), "failed": sum(not s.ok for s in w.samples),
        "errors": sorted({s.error for s in w.samples if s.error})[:3],
        "idle": w.idle, "frozen": st.get("frozen"), "reason": st.get("reason", ""),
        "cycles": st.get("cycles"), "promotions": mine,
        "wall_s": round(w.settled - w.start, 1),
    }


def print_header() -> None:
    print(f"{'win':>3} {'phase':<11} {'served':<6} {'nDCG@10':>7} {'head':>6} {'tail':>6} "
          f"{'pairs':>6} {'left':>6} {'p50 ms':>7} {'p99 ms':>7} {'fail':>4} {'cyc':>3} "
          f"{'wall s':>6}  promotions (visible s)")


def print_row(r: dict[str, Any]) -> None:
    promos = ", ".join(f"{p['version'] or 'raw'} {_vis(p)}" for p in r["promotions"]) or "-"
    seen = "+".join(r["versions_in_window"])
    print(f"{r['window']:>3} {r['phase']:<11} {r['served']:<6} {r['ndcg']:7.4f} "
          f"{r['ndcg_head']:6.4f} {r['ndcg_tail']:6.4f} {r['pairs_judged']:>6} "
          f"{r['budget_left']:>6} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} {r['failed']:>4} "
          f"{r['cycles']:>3} {r['wall_s']:>6}  {promos}  [served in window: {seen}]"
          + ("" if r["idle"] else "  (learner not idle at the timeout)")
          + (f"  frozen: {r['reason']}" if r["frozen"] else ""))
    for e in r["errors"]:
        print(f"      error: {e}")


def _vis(p: dict[str, Any]) -> str:
    return "never seen" if p["visible_s"] is None else f"{p['visible_s']:.2f}"


def all_samples(ctx: Replay) -> list[Sample]:
    return ([s for w in ctx.windows for s in w.samples] + list(ctx.prober.samples)
            + ctx.extra)


def promotions(registry: Path, samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Each promotion or rollback of served.json with its registration time and the time
    to the first response carrying its version."""
    path = registry / "served.json"
    if not path.exists():
        return []
    history = json.loads(path.read_text())["history"]
    done = sorted((s.done, s.version) for s in samples if s.ok)
    out = []
    for i, h in enumerate(history):
        t = float(h["time"])
        npz = registry / "versions" / str(h["version"]) / "vectors.npz"
        registered = min(t, npz.stat().st_mtime) if h["action"] == "promote" and \
            npz.exists() else t
        nxt = float(history[i + 1]["time"]) if i + 1 < len(history) else math.inf
        seen = next((d for d, v in done if d >= t and v == h["version"]), None)
        superseded = seen is None and nxt < math.inf
        out.append({"action": h["action"], "version": h["version"], "from": h["from"],
                    "by": h["by"], "time": t, "registered": registered,
                    "visible_s": None if seen is None else seen - registered,
                    "superseded": superseded})
    return out


def replay(ctx: Replay) -> list[dict[str, Any]]:
    """Every window; before the judge turns, one pass of the head queries alone (the
    reference: what is served at the moment of the inversion, after the last normal
    window's own cycles)."""
    print_header()
    rows: list[dict[str, Any]] = []
    for n, (phase, tail) in enumerate(zip(ctx.plan.phases, ctx.plan.tails), start=1):
        if phase != "normal" and not any(r["phase"] == "reference" for r in rows):
            rows.append(one_window(ctx, n - 1, "reference", list(ctx.plan.head)))
        rows.append(one_window(ctx, n, phase, list(ctx.plan.head) + list(tail)))
    return rows


def one_window(ctx: Replay, n: int, phase: str, qids: list[str]) -> dict[str, Any]:
    order = np.random.default_rng(ctx.args.seed + n).permutation(len(qids))
    w = run_window(ctx, n, phase, [qids[i] for i in order])
    ctx.windows.append(w)
    row = window_row(ctx, w, promotions(ctx.server.registry, all_samples(ctx)))
    print_row(row)
    sys.stdout.flush()
    return row


# -- the rollback -----------------------------------------------------------------------------
def rollback(ctx: Replay, timeout: float = 30.0) -> dict[str, Any]:
    """``tttembed states rollback DIR`` (the CLI); seconds until a response carries the
    version it serves now."""
    before = ctx.api.loop_status()["version"]
    t0 = time.time()
    out = subprocess.run(cli("states", "rollback", str(ctx.server.registry)),
                         capture_output=True, text=True, env=ctx.server.env, timeout=120)
    path = ctx.server.registry / "served.json"
    served = json.loads(path.read_text()) if path.exists() else \
        {"served": None, "history": [{"time": t0}]}  # nothing was ever promoted
    target = served["served"]
    entry_t = float(served["history"][-1]["time"])
    seen, text = None, ctx.data.queries[ctx.plan.head[0]]
    while time.time() - t0 < timeout:
        s = ctx.api.search(ctx.plan.head[0], text, "rollback", 0, "?", False)
        ctx.extra.append(s)
        if s.ok and s.version == target and target != before:
            seen = s.done
            break
        time.sleep(0.05)
    return {"before": before, "after": target, "cli": (out.stdout + out.stderr).strip(),
            "rc": out.returncode, "visible_s": None if seen is None else seen - entry_t}


def states_list(server: Server) -> str:
    out = subprocess.run(cli("states", "list", str(server.registry)), capture_output=True,
                         text=True, env=server.env, timeout=120)
    return (out.stdout + out.stderr).rstrip()


# -- summaries --------------------------------------------------------------------------------
def gain_test(ctx: Replay, rows: list[dict[str, Any]]) -> dict[str, Any]:
    normal = [r for r in rows if r["phase"] == "normal"]
    first, last = normal[0]["per_query"], normal[-1]["per_query"]
    qs = [q for q in ctx.plan.head if q in first and q in last]
    a, b = [last[q] for q in qs], [first[q] for q in qs]
    gain = mean(a) - mean(b)
    p = sign_flip(a, b, ctx.args.seed) if qs else 1.0
    return {"queries": len(qs), "first": mean(b), "last": mean(a), "gain": gain,
            "p_two_sided": p, "p_goal": p if gain > 0 else 1.0,
            "better": sum(x > y for x, y in zip(a, b)), "worse": sum(x < y for x, y in zip(a, b))}


def adversarial_drop(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Head nDCG@10 of the windows with the judge inverted (and restored) against the
    reference pass just before the inversion."""
    refs = [r for r in rows if r["phase"] == "reference"] or \
        [r for r in rows if r["phase"] == "normal"][-1:]
    ref = refs[0]["ndcg_head"]
    later = [r for r in rows if r["phase"] in ("adversarial", "restored")]
    drops = [ref - r["ndcg_head"] for r in later]
    return {"reference": ref, "heads": [r["ndcg_head"] for r in later],
            "max_drop": max(drops) if drops else 0.0}


def probe_latencies(samples: Sequence[Sample], state: str) -> np.ndarray:
    """Seconds of the probes sent outside the windows' bursts in one learner state."""
    return np.array([s.latency for s in samples if s.kind == "probe" and not s.burst
                     and s.state == state and s.ok])


def latency_by_state(samples: Sequence[Sample], seed: int) -> dict[str, Any]:
    """Probe latency by the learner's state when sent, and the p99 ratio learning / idle
    with a bootstrap 95% interval (a p99 of a few hundred probes rests on a few)."""
    lat = {st: probe_latencies(samples, st) for st in ("idle", "judging", "learning")}
    out: dict[str, Any] = {st: {"n": len(v), "p50_ms": pct(v, 50), "p99_ms": pct(v, 99)}
                           for st, v in lat.items()}
    busy, idle = lat["learning"], lat["idle"]
    if len(busy) and len(idle):
        rng = np.random.default_rng(seed)
        ratios = [np.percentile(rng.choice(busy, len(busy)), 99)
                  / np.percentile(rng.choice(idle, len(idle)), 99) for _ in range(2000)]
        out["ratio"] = pct(busy, 99) / pct(idle, 99)
        out["ratio_ci"] = [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]
    return out


def print_latency(lat: dict[str, Any]) -> None:
    print("probe latency outside the bursts, by the learner's state when sent:")
    for state in ("idle", "judging", "learning"):
        v = lat[state]
        print(f"  {state:<9} n {v['n']:>5}  p50 {v['p50_ms']:7.1f} ms  p99 "
              f"{v['p99_ms']:7.1f} ms")
    if "ratio" in lat:
        lo, hi = lat["ratio_ci"]
        print(f"  p99 learning / idle = {lat['ratio']:.2f} (bootstrap 95% interval "
              f"[{lo:.2f}, {hi:.2f}]; goal <= 1.5)")
    if lat["learning"]["n"] < 100 or lat["idle"]["n"] < 100:
        print("  note: fewer than 100 probes in a state: its p99 is close to its maximum")


# -- the loop mode ----------------------------------------------------------------------------
def serve_args(args: argparse.Namespace, judge_url: str, budget: int) -> list[str]:
    return ["--learn", "--judge", f"rerank:judge@{judge_url}", "--judge-budget",
            str(budget), "--judge-rpm", str(args.judge_rpm), "--learn-every",
            str(args.learn_every), "--corpus", str(args.data),
            "--min-queries", str(args.min_queries),
            *(["--cache-size", str(args.cache_size)] if args.cache_size is not None else [])]


def measure(args: argparse.Namespace, work: Path) -> int:
    data = load_data(args.data, args.split)
    plan = make_plan(sorted(data.queries), args.windows, args.head, args.tail,
                     args.adversarial, args.seed)
    budget = args.budget_per_query * plan.distinct
    print(f"{data.name}: {len(plan.head)} head + {len(plan.tails[0])} tail queries a window, "
          f"{len(plan.phases)} windows ({args.windows} normal, {args.adversarial} adversarial, "
          f"1 restored), {plan.distinct} distinct queries; judge sigma {args.sigma}, budget "
          f"{budget} pairs ({args.budget_per_query} a distinct query), learn every "
          f"{args.learn_every}, {args.clients} clients, probes {args.probe_rps}/s")
    judge = Judge(data, args.sigma, args.seed)
    judge_server = loopback_servers().LocalOpenAIServer(rerank=judge)
    with judge_server as rerank, ThreadPoolExecutor(args.clients) as pool:
        server = start_serve(args.index, work / "registry", work,
                             serve_args(args, rerank.url, budget), "serve", args.port)
        api = Api(server.url, data.name)
        wait_learner(api)
        poller = Poller(api)
        poller.start()
        burst = threading.Event()
        prober = Prober(api, poller, [(q, data.queries[q]) for q in plan.head],
                        args.probe_rps, burst)
        ctx = Replay(args, data, plan, judge, api, poller, prober, pool, burst, server)
        time.sleep(1.0)
        try:
            return finish(ctx, replay(ctx), budget)
        finally:
            prober.stop.set()
            poller.stop.set()
            if prober.is_alive():
                prober.join(30)
            CHILDREN.stop(server.proc)


def report_registry(ctx: Replay) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The loop's status after the last window, ``states list``, then the rollback."""
    status = ctx.api.loop_status()
    print(f"\nafter the restored window: serving {status['version'] or 'raw'}, frozen "
          f"{status['frozen']}, reason {status['reason']!r}, cycles {status['cycles']}, "
          f"last cycle: {status['last_cycle'].get('reason', '')}")
    for a in status.get("audits", [])[-4:]:
        print(f"  audit {a.get('at')}: pairs {a.get('pairs')} disagreement "
              f"{a.get('disagreement')} passed {a.get('passed')} {a.get('reason', '')}")
    listing = states_list(ctx.server)
    print(f"\n$ tttembed states list DIR\n{listing}")
    rb = rollback(ctx)
    seen = "never (30 s)" if rb["visible_s"] is None else f"{rb['visible_s']:.2f} s"
    print(f"\n$ tttembed states rollback DIR\n{rb['cli']}\n  {rb['before'] or 'raw'} -> "
          f"{rb['after'] or 'raw'}: first response carrying it {seen} after the CLI wrote "
          "served.json")
    return status, listing, rb


def report_quality(ctx: Replay, rows: list[dict[str, Any]]
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    gain, adv = gain_test(ctx, rows), adversarial_drop(rows)
    print(f"\nhead queries ({gain['queries']}): nDCG@10 {gain['first']:.4f} (window 1) -> "
          f"{gain['last']:.4f} (window {ctx.args.windows}), {gain['gain']:+.4f}, "
          f"{gain['better']} better / {gain['worse']} worse, paired sign-flip p = "
          f"{gain['p_two_sided']:.4g} (two-sided)")
    adv["inverted_pairs"] = ctx.judge.inverted_pairs
    adv["frozen_seen"] = any(r["frozen"] for r in rows if r["phase"] != "normal")
    print(f"inverted judge: head nDCG@10 {adv['reference']:.4f} in the reference pass, "
          f"{', '.join(f'{h:.4f}' for h in adv['heads'])} after; largest drop "
          f"{adv['max_drop']:+.4f} (goal <= {ADV_DROP}); {adv['inverted_pairs']} pairs "
          f"scored inverted, frozen after a window: {adv['frozen_seen']}")
    if not adv["inverted_pairs"]:
        print("  not exercised: the judge scored no pair while inverted (budget spent)")
    return gain, adv


def report_serving(ctx: Replay, rb: dict[str, Any], paid: int, budget: int
                   ) -> dict[str, Any]:
    """Failed requests and every promotion's (and the rollback's) visible time."""
    samples = all_samples(ctx)
    promos = promotions(ctx.server.registry, samples)
    shown = [p for p in promos if not p["superseded"]]
    unseen = [p["version"] for p in shown if p["visible_s"] is None]
    failed = sum(not s.ok for s in samples)
    print(f"promotions/rollbacks: {len(promos)} (superseded before any response: "
          f"{len(promos) - len(shown)}), visible after "
          f"{', '.join(_vis(p) for p in shown) or '-'} s; requests {len(samples)}, failed "
          f"{failed}; judge pairs {paid} of {budget} (the rerank server scored "
          f"{ctx.judge.pairs}, unknown query texts {ctx.judge.unknown_queries})")
    if unseen:
        print(f"never seen in a response: {unseen}")
    times = [p["visible_s"] for p in shown]
    slowest = None if unseen or rb["visible_s"] is None or not times else \
        max([*times, rb["visible_s"]])
    return {"promotions": promos, "failed": failed, "slowest": slowest}


def finish(ctx: Replay, rows: list[dict[str, Any]], budget: int) -> int:
    status, listing, rb = report_registry(ctx)
    lat = latency_by_state(all_samples(ctx), ctx.args.seed)
    print()
    print_latency(lat)
    gain, adv = report_quality(ctx, rows)
    paid = int(status["pairs_judged"])
    serving = report_serving(ctx, rb, paid, budget)
    measured: dict[str, float | None] = {
        "gain_p": gain["p_goal"], "gain": gain["gain"],
        "adv_drop": adv["max_drop"] if adv["inverted_pairs"] else None,
        "p99_ratio": lat.get("ratio"),
        "failed": float(serving["failed"]), "visible": serving["slowest"],
        "pairs_per_query": budget / ctx.plan.distinct,
        "paid_per_query": paid / ctx.plan.distinct,
    }
    ok = check(GOALS, measured)
    if not adv["inverted_pairs"]:
        ok.append(False)
        print("goal 2 was not exercised (no pair judged while inverted): this run does not "
              "show it")
    emit({k: GOALS[k] for k in measured}, measured, note=ctx.data.name)
    write_json(ctx.args.json, {"task": ctx.data.name, "args": jsonable(vars(ctx.args)),
                               "budget": budget, "rows": rows, "rollback": rb, "latency": lat,
                               "gain": gain, "adversarial": adv, "status": status,
                               "states_list": listing, "measured": measured,
                               "promotions": serving["promotions"],
                               "probes": probe_rows(ctx)})
    return 0 if all(ok) else 1


def probe_rows(ctx: Replay) -> list[list[Any]]:
    """Every probe: [seconds since the first, latency ms, state, burst, window, version]."""
    probes = ctx.prober.samples
    t0 = probes[0].sent if probes else 0.0
    return [[round(s.sent - t0, 3), round(s.latency * 1000, 2), s.state, s.burst, s.window,
             s.version] for s in probes]


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--windows", type=int, default=5, help="normal windows")
    ap.add_argument("--head", type=int, default=60, help="head queries (every window)")
    ap.add_argument("--tail", type=int, default=20, help="fresh tail queries a window")
    ap.add_argument("--adversarial", type=int, default=2, help="windows with the judge "
                    "inverted (then one with it restored)")
    ap.add_argument("--sigma", type=float, default=0.2, help="judge noise")
    ap.add_argument("--budget-per-query", type=int, default=10)
    ap.add_argument("--learn-every", type=int, default=200)
    ap.add_argument("--min-queries", type=int, default=20,
                    help="the loop's --min-queries (its default; a tiny run needs fewer)")
    ap.add_argument("--judge-rpm", type=float, default=6000.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--probe-rps", type=float, default=10.0, help="prober requests a second")
    ap.add_argument("--idle-s", type=float, default=4.0, help="seconds of idle probing "
                    "after each window")
    ap.add_argument("--idle-timeout", type=float, default=300.0, help="most seconds to "
                    "wait for the learner after a window")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds the learner must "
                    "stay idle before a window counts as settled")
    ap.add_argument("--cache-size", type=int, help="the server's --cache-size (default: "
                    "its own; 0: every request runs the model, probes included)")
    return run(ap.parse_args(argv), measure)


if __name__ == "__main__":
    sys.exit(main())
