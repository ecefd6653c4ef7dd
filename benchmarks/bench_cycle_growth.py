"""How a learning cycle's time grows with the number of rewarded texts, without and with
the bounded window (:mod:`tttembed.loop.window`), offline: no soak, no server.

    python benchmarks/bench_cycle_growth.py [--data ../shared/data/scifact] [--docs 1500]
        [--sizes 50,200,800] [--window 200] [--profile]

Rewards as ``replay_soak_rewards.py`` draws them (Zipf traffic over SciFact's train
questions, each text's raw top 10 rewarded as the click feed would). At each size n the
first n distinct texts asked are rewarded and one cycle runs as the learner's does:
method auto (scopes query, task; validation cap ``--cap``; the shared parts' documents
valued at the unseen floor), the out-of-fold shared part, the two-population check
against the version the previous size registered. ``full`` learns from every rewarded
text (the first rule); ``window-only`` from at most ``--window`` texts, those changed
most recently, the others keeping the served version's query-wise vectors (the second);
``window`` (the learner's rule now) learns the query part so and the shared part, with
the new questions' check, from the shared set (:mod:`tttembed.loop.shared_set`: the
window's texts and the others changed most recently, at most ``SHARED_TEXTS``).

GOAL: a cycle at the largest size takes at most 2x the cycle at the smallest size
(window). Prints each cycle's parts (seconds), the ratio largest/smallest for both
rules, and the nDCG@10 of the asked texts and of SciFact's test questions as each
registered version and the served one after each cycle serve them (the window's quality
next to the full rule's).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _soak_setup import prepare_task  # noqa: E402
from _support import DATA  # noqa: E402
from claims import Goal, emit  # noqa: E402
from replay_soak_rewards import _rewards, asked_texts, query_set  # noqa: E402

TASK = "scifact"
GOAL = 2.0  # cycle time at the largest size / at the smallest, at most
GOALS = {
    "window": Goal("a cycle's time at the largest size / at the smallest, bounded window",
                   "<=", GOAL, "x"),
    "window-only": Goal("a cycle's time at the largest size / at the smallest, the window "
                        "alone (the rule before the shared set)", "info", None, "x"),
    "full": Goal("a cycle's time at the largest size / at the smallest, every text "
                 "(the first rule)", "info", None, "x"),
    "test_delta": Goal("test questions' nDCG@10 at the largest size, window - every text "
                       "(registered versions)", "info", None),
    "asked_delta": Goal("asked texts' nDCG@10 at the largest size, window - every text "
                        "(registered versions)", "info", None),
}
#: functions whose cumulative time --profile shows (module-qualified names)
PROFILED = ("learn_auto", "learn_state", "rewards_coef", "select_methods", "_shared_part",
            "query_alphas", "_query_part", "mixed_state", "oof_shared", "check_two",
            "check_promotion", "check_lists", "search")


@dataclass
class Setup:
    task: Any
    index: Any
    emb: Any
    qs: Any
    base: Any
    rewards: dict[str, dict[str, float]]
    floor: float
    of: dict[str, str]
    test: Any = None
    test_x: Any = None
    log: list[str] = field(default_factory=list)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA / "scifact"), help="SciFact's BEIR folder")
    ap.add_argument("--docs", type=int, default=1500,
                    help="documents indexed: the judged ones first (0: the whole corpus)")
    ap.add_argument("--work", default="/tmp/tttembed-cycle-growth",
                    help="where the index is built once and reused")
    ap.add_argument("--sizes", default="50,200,800",
                    help="rewarded texts per cycle, comma-separated, increasing")
    ap.add_argument("--window", type=int, default=0,
                    help="the window's texts (0: the learner's WINDOW)")
    ap.add_argument("--searches", type=int, default=25000, help="searches drawn (Zipf)")
    ap.add_argument("--cap", type=int, default=50, help="method auto's validation cap")
    ap.add_argument("--rules", default="full,window",
                    help="which rules to run, comma-separated: full (every text), window "
                         "(the window's query part under the shared set's shared part, the "
                         "learner's rule), window-only (the window alone, the rule before)")
    ap.add_argument("--profile", action="store_true",
                    help="also print each cycle's cumulative time per function (cProfile)")
    ap.add_argument("--seed", type=int, default=0, help="the traffic's seed")
    return ap.parse_args(argv)


def setup(args: argparse.Namespace) -> Setup:
    """The task, its index, every asked text in order of first asking, their base
    retrieval and rewards (``replay_soak_rewards.py``'s draw)."""
    from tttembed.index.embedder import index_embedder
    from tttembed.index.store import load_index
    from tttembed.ttt.queries import base_retrieval

    task = prepare_task(Path(args.data), args.docs, Path(args.work))
    index = load_index(task.index)
    emb = index_embedder(index, None)
    asked = asked_texts(task, args.seed, args.searches)

    def qset(qids: list[str]) -> Any:
        return query_set(TASK, task.questions, qids)

    qs = qset([q for q, _ in asked])
    of = dict(zip(qs.keys, [q for q, _ in asked]))
    base = base_retrieval(index, emb, qs, 100)
    rewards, floor = _rewards("clicks", qs.keys, [n for _, n in asked], base.rows,
                              index.doc_ids, lambda k, d: rel(task, of, k, d),
                              np.random.default_rng(args.seed + 2))
    test = [q for q in task.test if q in task.questions]
    tq = qset(test)
    return Setup(task, index, emb, qs, base, rewards, floor, of, (test, tq),
                 base_retrieval(index, emb, tq, 100).x)


def rel(task: Any, of: dict[str, str], key: str, doc: str) -> float:
    return float(task.qrels.get(of.get(key, key), {}).get(doc, 0) > 0)


def subset(s: Setup, rows: list[int]) -> tuple[Any, Any, dict[str, dict[str, float]]]:
    """The query set, base retrieval and rewards of the asked texts ``rows``."""
    from tttembed.ttt.queries import BaseRetrieval

    qs = s.qs.subset(rows)
    base = BaseRetrieval(x=s.base.x[rows], rows=s.base.rows[rows], scores=s.base.scores[rows])
    return qs, base, {k: s.rewards[k] for k in qs.keys}


def one_cycle(s: Setup, rows: list[int], served: list[Any], cap: int,
              outside: list[tuple[str, str]], wide: list[int] | None = None
              ) -> tuple[Any, bool, dict[str, float]]:
    """One cycle on the texts ``rows`` (the window), its shared part on ``wide`` (the
    shared set) when it holds more: (the registered state, promoted?, its parts'
    seconds)."""
    from tttembed.loop.nojudge import FloorOrPay
    from tttembed.loop.populations import NewSet, check_two, decide, oof_shared
    from tttembed.loop.shared_set import with_shared
    from tttembed.loop.window import keep_served
    from tttembed.ttt.distil import learn_auto

    qs, base, rw = subset(s, rows)
    widen = wide is not None and len(wide) > len(rows)
    qw, base_w, rw_w = subset(s, wide) if wide is not None and widen else (qs, base, rw)

    def pay(pairs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for k, d in pairs:
            out.setdefault(k, {})[d] = rel(s.task, s.of, k, d)
        return out

    fp = FloorOrPay({k: s.floor for k in qw.keys}, pay)
    t0 = time.perf_counter()
    state = learn_auto([(qs, base, s.index)], rw, pay, validate_cap=cap,
                       scopes=("query", "task"), seed=0, shared_pay=fp)
    if widen:
        state = with_shared(state, learn_auto([(qw, base_w, s.index)], rw_w, pay,
                                              validate_cap=cap, scopes=("task",), seed=0,
                                              shared_pay=fp), len(qw))
    state = keep_served(state, served, outside)
    t1 = time.perf_counter()
    new_x = oof_shared(s.index, qw, base_w, rw_w, state, seed=0)
    t2 = time.perf_counter()
    kept, two = check_two(s.index, qs, base.x, rw, served, state, new_x, pay,
                          cap=lambda: cap, new_pay=fp, new_cap=10**9,
                          new_on=NewSet(qw, base_w.x, rw_w) if widen else None)
    t3 = time.perf_counter()
    ok, _ = decide(two, frozen=False, candidate=[kept] if kept is not None else [])
    return kept, ok, {"learn_auto": t1 - t0, "oof_shared": t2 - t1, "check_two": t3 - t2,
                      "cycle": t3 - t0}


def ndcg(s: Setup, qids: list[str], qs: Any, x: np.ndarray, states: list[Any]) -> float:
    from tttembed.loop.promote import adapted
    from tttembed.metrics.ranking import per_query_metric
    from tttembed.ttt.judged import top_lists

    lists = top_lists(s.index, adapted(x, qs.texts, qs.tasks, states))
    run = {q: {d: 10.0 - j for j, d in enumerate(lst)} for q, lst in zip(qids, lists)}
    per = per_query_metric({q: s.task.qrels.get(q, {}) for q in qids}, run, "ndcg@10")
    return float(np.mean([per.get(q, 0.0) for q in qids]))


def quality(s: Setup, n: int, registered: list[Any], served: list[Any]) -> dict[str, float]:
    """nDCG@10 of the first ``n`` asked texts and of the test questions as the registered
    and the served version serve them."""
    asked_ids = [s.of[k] for k in s.qs.keys[:n]]
    asked_qs = s.qs.subset(list(range(n)))
    test_ids, tq = s.test
    out = {}
    for name, states in (("", registered), ("served_", served)):
        out[f"{name}asked"] = ndcg(s, asked_ids, asked_qs, s.base.x[:n], states)
        out[f"{name}test"] = ndcg(s, test_ids, tq, s.test_x, states)
    return out


def run_rule(s: Setup, rule: str, sizes: list[int], window: int, cap: int,
             profile: bool) -> list[dict[str, float]]:
    """Cycles at each size, each against the version served (the last promoted)."""
    from tttembed.loop.shared_set import SHARED_TEXTS
    from tttembed.loop.window import RecentTexts

    bounded = rule in ("window", "window-only")
    recent: RecentTexts[str] = RecentTexts(window if bounded else 10**9,
                                           remembered=max(window, 20_000 if bounded
                                                          else 10**9))
    served: list[Any] = []
    out = []
    for n in sizes:
        upto = {k: s.rewards[k] for k in s.qs.keys[:n]}
        window_keys = recent.pick(upto)
        picked = set(window_keys)
        rows = [i for i in range(n) if s.qs.keys[i] in picked]
        outside = [(s.qs.tasks[i], s.qs.texts[i]) for i in range(n) if i not in set(rows)]
        shared = set(recent.latest(upto, SHARED_TEXTS, keep=window_keys))
        wide = [i for i in range(n) if s.qs.keys[i] in shared] if rule == "window" else None
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        kept, ok, t = one_cycle(s, rows, served, cap, outside, wide)
        if prof is not None:
            prof.disable()
            print_profile(rule, n, prof)
        if ok and kept is not None:
            served = [kept]
        out.append({"n": n, "learned": len(rows), "shared_set": len(wide or rows), **t,
                    "promoted": float(ok),
                    **quality(s, n, [kept] if kept is not None else [], served)})
        r = out[-1]
        print(f"{rule:6s} {n:5d} texts (learned {len(rows):4d}, shared part from "
              f"{r['shared_set']:4.0f}): learn_auto "
              f"{r['learn_auto']:7.2f} s, oof_shared {r['oof_shared']:6.2f} s, check_two "
              f"{r['check_two']:6.2f} s, cycle {r['cycle']:7.2f} s; promoted {ok}; nDCG@10 "
              f"registered: asked {r['asked']:.4f}, test {r['test']:.4f}; served: asked "
              f"{r['served_asked']:.4f}, test {r['served_test']:.4f}", flush=True)
    return out


def print_profile(rule: str, n: int, prof: cProfile.Profile) -> None:
    st = pstats.Stats(prof)
    got: dict[str, float] = {}
    for (_, _, name), (_, _, _, cum, _) in st.stats.items():  # type: ignore[attr-defined]
        if name in PROFILED:
            got[name] = max(got.get(name, 0.0), cum)
    print(f"  profile {rule} {n}: " + ", ".join(f"{k} {got[k]:.2f}"
                                                for k in PROFILED if k in got), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from tttembed.loop.window import WINDOW

    if not (Path(args.data) / "qrels" / "train.tsv").exists():
        print(f"error: --data: {args.data} has no qrels/train.tsv (give SciFact's BEIR "
              "folder)", file=sys.stderr)
        return 2
    sizes = [int(v) for v in args.sizes.split(",") if v.strip()]
    window = args.window or WINDOW
    t0 = time.perf_counter()
    s = setup(args)
    sizes = [min(n, len(s.qs)) for n in sizes]
    print(f"{len(s.qs)} texts asked, {args.docs or 'all'} docs, window {window}; setup "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    results = {rule: run_rule(s, rule, sizes, window, args.cap, args.profile)
               for rule in args.rules.split(",")}
    measured: dict[str, float | None] = {}
    for rule, rows in results.items():
        measured[rule] = rows[-1]["cycle"] / max(rows[0]["cycle"], 1e-9)
        print(f"{rule}: cycle at {rows[-1]['n']} texts / at {rows[0]['n']} texts = "
              f"{measured[rule]:.2f}x (goal for the window <= {GOAL:g}x)")
    if {"full", "window"} <= set(results):
        last = {rule: rows[-1] for rule, rows in results.items()}
        measured["test_delta"] = last["window"]["test"] - last["full"]["test"]
        measured["asked_delta"] = last["window"]["asked"] - last["full"]["asked"]
    emit(GOALS, measured, note=f"sizes {args.sizes}, window {window}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
