"""Clicks as rewards, measured offline: propensities, interleaving and bots on real tasks.

    python benchmarks/bench_clicks.py [--tasks scifact,cranfield,cisi] [--searches 20000]
        [--eta 1] [--explore 0.05] [--runs 100] [--gap 0.02] [--bots 0.1] [--json F]

In process, no server: each task's judged test queries are ranked by the embedded model
(``all-MiniLM-L6-v2``, the evaluation's cached index and top-100), and simulated users
(``tttembed.loop.clicks.simulate``) search them, queries drawn Zipf-like (exponent 1),
clicking by the position-based model: rank r examined with probability 1/r^eta, an
examined document clicked with 0.1 + 0.8 * grade / top grade (``--user cascade``: the
interleaving and A/B runs use the cascade model instead, one click at most). "Versions" are the raw
ranking and the raw scores plus Gaussian noise (re-sorted within the top 100): what a
loop's successive states look like to the click log. The worse state of g4/g5 takes the
noisy list only on the queries where it is worse than raw (raw elsewhere), the noise
width found by bisection so that the gap in true nDCG@10 is ``--gap``. Each
task's query popularity is Zipf over a seeded order, fixed for the run; "true nDCG@10" is
the mean over the traffic (queries weighted by popularity), which is what clicks see.

Goals (issue 36, must-have 5), each printed as a claim:

- g3: the harvested propensities within 10% (relative) of the true 1/r^eta at ranks 1-10
  after ``--searches`` searches, (a) from three served versions without exploration and
  (b) from the raw version alone with RandPair on ``--explore`` of the searches;
- g4: team-draft interleaving with the mixture SPRT (alpha 0.05) between two versions
  whose true nDCG@10 differs by ``--gap`` picks the better in >= 95% of ``--runs`` runs
  (the better as candidate: "B better"; the worse as candidate: never "B better" more
  than alpha), and its median number of searches to decide is <= 1/10 of what an A/B
  test on the mean clicks per search needs at the same power (95%, two-sided alpha
  0.05; computed exactly from the same click model and query distribution);
- g5 (partial): with ``--bots`` of the searches by bots (always rank 1; uniform), the
  bot sessions are dropped from the click rewards and real ones kept, and the worse
  version as candidate is never called better in 20 interleaving runs.

The through-the-server goals (clicks-only loop gain with ``--judge none``; debiased vs
naive served nDCG@10) need the events route and the learner integration; a ``--server``
mode would replace :class:`Versions` by lists served over HTTP and keep the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from _support import DATA, write_json
from claims import Goal, emit

from tttembed.loop.clicks import simulate as sim

TASKS = ("scifact", "cranfield", "cisi")
K = 10
GOALS = {
    "g3_versions": Goal("clicks: propensity max relative error at ranks 1-10, 3 versions",
                        "<=", 0.10),
    "g3_explore": Goal("clicks: propensity max relative error at ranks 1-10, raw + RandPair",
                       "<=", 0.10),
    "g4_correct": Goal("clicks: interleaving picks the better candidate, share of runs",
                       ">=", 0.95),
    "g4_false": Goal("clicks: interleaving calls the worse candidate better, share of runs",
                     "<=", 0.05),
    "g4_ratio": Goal("clicks: interleaving median searches / A/B searches at the same power",
                     "<=", 0.10),
    "g5_bots_dropped": Goal("clicks: bot sessions dropped, share", ">=", 1.0),
    "g5_users_dropped": Goal("clicks: real sessions dropped, share", "<=", 0.0),
    "g5_harm": Goal("clicks: worse candidate called better with bots, share of runs",
                    "<=", 0.0),
}


@dataclass(frozen=True)
class Versions:
    """One task's judged queries, qrels, and the raw top-100 rows with their scores."""

    name: str
    qids: tuple[str, ...]
    texts: dict[str, str]
    qrels: Mapping[str, Mapping[str, int]]
    ids: dict[str, list[str]]
    scores: dict[str, np.ndarray]
    #: each query's share of the traffic: Zipf (exponent 1) over a seeded order
    popularity: np.ndarray

    @property
    def top(self) -> float:
        return float(max(g for q in self.qrels.values() for g in q.values()))

    def noisy(self, sigma: float, seed: int) -> dict[str, list[str]]:
        """Top-k of the raw scores plus N(0, sigma^2) noise (one draw per query)."""
        rng = np.random.default_rng(seed)
        out = {}
        for q in self.qids:
            s = self.scores[q] + rng.normal(0.0, sigma, len(self.scores[q]))
            out[q] = [self.ids[q][i] for i in np.argsort(-s, kind="stable")[:K]]
        return out

    def raw(self) -> dict[str, list[str]]:
        return {q: self.ids[q][:K] for q in self.qids}


def zipf_popularity(n: int, seed: int) -> np.ndarray:
    """Zipf shares (exponent 1) of ``n`` queries in a seeded random order."""
    p = np.zeros(n)
    p[np.random.default_rng(seed).permutation(n)] = 1.0 / np.arange(1, n + 1)
    return p / p.sum()


def load_versions(data_root: Path, tasks: Sequence[str], seed: int) -> list[Versions]:
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.runner import prepare_workload

    work = prepare_workload(EvalConfig(tasks=tuple(tasks), data_root=str(data_root)))
    out = []
    for td in work.data:
        qrels = {q: g for q, g in td.qrels.items() if any(v > 0 for v in g.values())}
        ids, scores, texts = {}, {}, {}
        for i, (qid, text) in enumerate(zip(td.queries.qids, td.queries.texts, strict=True)):
            if qid in qrels:
                rows = td.base.rows[i]
                ids[qid] = [td.index.doc_ids[r] for r in rows if r >= 0]
                scores[qid] = td.base.scores[i][: len(ids[qid])].astype(np.float64)
                texts[qid] = text
        out.append(Versions(td.name, tuple(sorted(ids)), texts, qrels, ids, scores,
                            zipf_popularity(len(ids), seed)))
    return out


def per_query_ndcg(v: Versions, lists: Mapping[str, Sequence[str]]) -> np.ndarray:
    """nDCG@10 of ``lists`` per query (in ``v.qids`` order)."""
    from tttembed.metrics.ranking import ndcg_at_k

    run = {q: {d: float(K - r) for r, d in enumerate(lists[q])} for q in v.qids}
    per = ndcg_at_k({q: dict(v.qrels[q]) for q in v.qids}, run, K)
    return np.array([per.get(q, 0.0) for q in v.qids])


def ndcg(v: Versions, lists: Mapping[str, Sequence[str]], traffic: bool = True) -> float:
    """nDCG@10 of ``lists``: over the traffic (queries weighted by their popularity, the
    truth the interleaving sees) or, ``traffic=False``, the plain mean over queries."""
    vals = per_query_ndcg(v, lists)
    return float(vals @ v.popularity) if traffic else float(vals.mean())


def dominated(v: Versions, sigma: float, seed: int) -> dict[str, list[str]]:
    """The noisy version where it is worse than raw on a query, raw elsewhere: worse or
    equal on every query, so the clicks' verdict and nDCG@10 agree in sign per query."""
    raw, noisy = v.raw(), v.noisy(sigma, seed)
    worse = per_query_ndcg(v, noisy) < per_query_ndcg(v, raw)
    return {q: noisy[q] if w else raw[q] for q, w in zip(v.qids, worse, strict=True)}


def with_gap(v: Versions, gap: float, seed: int) -> tuple[float, dict[str, list[str]]]:
    """A :func:`dominated` version whose nDCG@10 over the traffic is ``gap`` below raw's
    (bisection on the noise width)."""
    spread = float(np.median([np.std(s[:K]) for s in v.scores.values()])) or 1e-3
    base, lo, hi = ndcg(v, v.raw()), 0.0, 20 * spread
    best = (hi, dominated(v, hi, seed))
    for _ in range(18):
        mid = (lo + hi) / 2
        lists = dominated(v, mid, seed)
        drop = base - ndcg(v, lists)
        best = (mid, lists)
        if abs(drop - gap) < 0.002:
            break
        lo, hi = (mid, hi) if drop < gap else (lo, mid)
    return best


# -- g3 ----------------------------------------------------------------------------------------
def traffic(v: Versions, rankers: Mapping[str, Mapping[str, list[str]]],
            explore: float) -> sim.ClickTraffic:
    return sim.ClickTraffic({q: v.texts[q] for q in v.qids}, v.qrels,
                            {n: lists.__getitem__ for n, lists in rankers.items()},
                            k=K, explore=explore, task=v.name)


def propensity_error(v: Versions, rankers: Mapping[str, Mapping[str, list[str]]],
                     explore: float, eta: float, n: int, seed: int) -> dict[str, object]:
    from tttembed.loop.clicks.propensity import estimate

    users = sim.Population({"u": sim.PositionBased(eta=eta, top=v.top)}, {"u": 1.0})
    shown = sim.simulate(traffic(v, rankers, explore), users, n, np.random.default_rng(seed))
    p = estimate(shown, K, seed=seed, resamples=50)
    err = np.abs(np.array(p.theta) / sim.examination(K, eta) - 1)
    return {"max_error": float(err.max()), "error": err.round(4).tolist(),
            "method": p.method, "interventions": p.interventions, **p.to_dict()}


# -- g4 / g5: interleaving ---------------------------------------------------------------------
@dataclass(frozen=True)
class Duel:
    """Interleaving runs of served ``a`` against candidate ``b`` on one task."""

    v: Versions
    a: Mapping[str, list[str]]
    b: Mapping[str, list[str]]
    eta: float
    bots: float = 0.0
    max_searches: int = 100_000
    cascade: bool = False

    def outcomes(self, qs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The interleaving outcomes (+1 candidate, -1 served, 0 tie) of searches for the
        queries at rows ``qs``, all at once: each search's interleaving is one of its
        query's :func:`drafts` (the coin tosses drawn uniformly), its clicks by the user
        model or a bot."""
        n = len(qs)
        pattern = rng.integers(0, DRAFTS, n)
        gamma, team_b = self.gamma[qs, pattern], self.team_b[qs, pattern]
        u = rng.random(gamma.shape)
        if self.cascade:
            hit = u < gamma
            clicks = hit & (np.cumsum(hit, axis=1) == 1)
        else:
            clicks = u < sim.examination(K, self.eta) * gamma
        bot = rng.random(n) < self.bots
        first = bot & (rng.random(n) < 0.5)
        uniform = bot & ~first
        clicks[bot] = False
        clicks[first, 0] = True
        clicks[np.flatnonzero(uniform), rng.integers(0, K, int(uniform.sum()))] = True
        wins_b = (clicks & team_b).sum(axis=1)
        wins_a = (clicks & ~team_b & self.shown[qs, pattern]).sum(axis=1)
        return np.sign(wins_b - wins_a).astype(np.int64)

    @cached_property
    def _drafts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return drafts(self.v, self.a, self.b)

    @property
    def gamma(self) -> np.ndarray:
        return self._drafts[0]

    @property
    def team_b(self) -> np.ndarray:
        return self._drafts[1]

    @property
    def shown(self) -> np.ndarray:
        return self._drafts[2]

    def run(self, seed: int, tau: float) -> tuple[str, int, float]:
        """One run to a decision (the mixture SPRT's rule on the stream so far, checked
        every 2,000 searches; queries drawn by the task's popularity): (decision, searches used, candidate's win share)."""
        from tttembed.loop.clicks.sequential import DECISIONS, SequentialTest, first_decisions

        rng = np.random.default_rng(seed)
        test = SequentialTest(tau=tau)
        seen = np.zeros(0, dtype=np.int64)
        while len(seen) < self.max_searches:
            qs = rng.choice(len(self.v.qids), 2000, p=self.v.popularity)
            seen = np.concatenate([seen, self.outcomes(qs, rng)])
            (d,), (used,) = first_decisions(seen[None, :], test)
            if d != 2:
                part = seen[:used]
                return DECISIONS[d], int(used), float((part == 1).sum() / max(
                    (part != 0).sum(), 1))
        return DECISIONS[2], len(seen), float((seen == 1).sum() / max((seen != 0).sum(), 1))


#: team-draft tosses a coin once per round of two picks: 2^(K/2) interleavings a query
DRAFTS = 2 ** (K // 2)


class Coins:
    """A stand-in generator for :func:`team_draft` whose coin tosses are the bits of
    ``pattern`` (so every interleaving of a pair of lists can be listed)."""

    def __init__(self, pattern: int) -> None:
        self.pattern, self.i = pattern, 0

    def integers(self, n: int) -> int:
        bit = (self.pattern >> self.i) & 1
        self.i += 1
        return bit


def drafts(v: Versions, a: Mapping[str, list[str]], b: Mapping[str, list[str]]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every team-draft interleaving of each query's lists (queries × DRAFTS × K): the
    attraction of each shown doc, whether B's team contributed it, whether a doc is
    shown there at all (short lists)."""
    from tttembed.loop.clicks.interleave import team_draft

    shape = (len(v.qids), DRAFTS, K)
    gamma, team_b, shown = np.zeros(shape), np.zeros(shape, bool), np.zeros(shape, bool)
    for i, q in enumerate(v.qids):
        for p in range(DRAFTS):
            inter = team_draft(a[q], b[q], K, Coins(p))
            m = len(inter.ids)
            gamma[i, p, :m] = sim.attraction(sim.grades_of(inter.ids, v.qrels[q]), 0.1,
                                             v.top)
            team_b[i, p, :m] = [t == "B" for t in inter.teams]
            shown[i, p, :m] = True
    return gamma, team_b, shown


def click_moments(v: Versions, ids: Sequence[str], q: str, eta: float,
                  cascade: bool) -> tuple[float, float]:
    """The exact mean and second moment of one search's clicks on ``ids`` for ``q``."""
    g = sim.attraction(sim.grades_of(ids, v.qrels[q]), 0.1, v.top)
    if cascade:  # at most one click: P(some click) = 1 - prod(1 - g)
        m = 1.0 - float(np.prod(1.0 - g))
        return m, m
    p = sim.examination(len(ids), eta) * g
    return float(p.sum()), float((p * (1 - p)).sum() + p.sum() ** 2)


def ab_searches(v: Versions, a: Mapping[str, list[str]], b: Mapping[str, list[str]],
                eta: float, power: float, alpha: float = 0.05, cascade: bool = False
                ) -> float:
    """Searches (both arms) an A/B test on mean clicks per search needs to tell ``a``
    from ``b`` at ``power`` (two-sided ``alpha``), from the exact per-search click mean
    and variance under the click model, queries weighted by their popularity."""
    from scipy.stats import norm

    stats = []
    for lists in (a, b):
        mean_q, second_q = [], []
        for q in v.qids:
            m1, m2 = click_moments(v, lists[q], q, eta, cascade)
            mean_q.append(m1)
            second_q.append(m2)
        m = float(np.array(mean_q) @ v.popularity)
        s2 = float(np.array(second_q) @ v.popularity)
        stats.append((m, s2 - m * m))
    (ma, va), (mb, vb) = stats
    z = norm.ppf(1 - alpha / 2) + norm.ppf(power)
    return 2 * z * z * (va + vb) / max((ma - mb) ** 2, 1e-18)


def duel_runs(duel: Duel, runs: int, seed: int, tau: float
              ) -> tuple[list[str], list[int], list[float]]:
    out = [duel.run(seed + i, tau) for i in range(runs)]
    return [d for d, _, _ in out], [n for _, n, _ in out], [w for _, _, w in out]


# -- g5: bot sessions in the click rewards ------------------------------------------------------
def bot_detection(v: Versions, rankers: Mapping[str, Mapping[str, list[str]]], eta: float,
                  bots: float, n: int, seed: int, sessions: int) -> dict[str, float]:
    from tttembed.loop.clicks.propensity import estimate
    from tttembed.loop.clicks.rewards import click_rewards

    users = sim.Population({"user": sim.PositionBased(eta=eta, top=v.top),
                            "first": sim.AlwaysFirst(), "uniform": sim.UniformRandom()},
                           {"user": 1 - bots, "first": bots / 2, "uniform": bots / 2},
                           sessions=sessions)
    shown = sim.simulate(traffic(v, rankers, 0.0), users, n, np.random.default_rng(seed))
    p = estimate(shown, K, resamples=0)  # bots included, as a server would see them
    dropped = set(click_rewards(shown, p).dropped_sessions)
    sessions = {s.session for s in shown}
    bot_s = {s for s in sessions if not s.startswith("user")}
    return {"bots_dropped": len(dropped & bot_s) / max(len(bot_s), 1),
            "users_dropped": len(dropped - bot_s) / max(len(sessions - bot_s), 1),
            "bot_sessions": float(len(bot_s)), "sessions": float(len(sessions))}


# -- the run -----------------------------------------------------------------------------------
def one_task(v: Versions, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    raw = v.raw()
    sigma, worse = with_gap(v, args.gap, args.seed)
    versions = {"raw": raw, "v1": v.noisy(sigma, args.seed + 1),
                "v2": v.noisy(sigma, args.seed + 2)}
    row: dict[str, Any] = {"task": v.name, "queries": len(v.qids), "sigma": sigma,
                              "ndcg_raw": ndcg(v, raw), "ndcg_worse": ndcg(v, worse),
                              "ndcg_v1": ndcg(v, versions["v1"]),
                              "ndcg_v2": ndcg(v, versions["v2"]),
                              "ndcg_raw_mean": ndcg(v, raw, traffic=False),
                              "ndcg_worse_mean": ndcg(v, worse, traffic=False)}
    row["g3_versions"] = propensity_error(v, versions, 0.0, args.eta, args.searches, args.seed)
    row["g3_explore"] = propensity_error(v, {"raw": raw}, args.explore, args.eta,
                                         args.searches, args.seed)
    cascade = args.user == "cascade"
    better = Duel(v, worse, raw, args.eta, max_searches=args.max_searches, cascade=cascade)
    dec, used, share = duel_runs(better, args.runs, args.seed, args.tau)
    wrong, _, _ = duel_runs(Duel(v, raw, worse, args.eta, max_searches=args.max_searches,
                                 cascade=cascade),
                         args.runs, args.seed + 10_000, args.tau)
    ab = ab_searches(v, raw, worse, args.eta, power=0.95, cascade=cascade)
    row["g4"] = {"correct": float(np.mean([d == "B better" for d in dec])),
                 "false": float(np.mean([d == "B better" for d in wrong])),
                 "undecided": float(np.mean([d == "undecided" for d in dec])),
                 "median_searches": float(np.median(used)),
                 "win_share": float(np.median(share)),
                 "p90_searches": float(np.percentile(used, 90)), "ab_searches": ab,
                 "ratio": float(np.median(used)) / ab}
    harm, _, _ = duel_runs(Duel(v, raw, worse, args.eta, bots=args.bots, cascade=cascade,
                             max_searches=args.max_searches), args.bot_runs, args.seed + 20_000,
                      args.tau)
    row["g5"] = {**bot_detection(v, versions, args.eta, args.bots, args.searches, args.seed,
                               args.sessions),
                 "harm": float(np.mean([d == "B better" for d in harm]))}
    row["seconds"] = time.perf_counter() - t0
    return row


def show(row: Mapping[str, Any]) -> None:
    g3v, g3e = row["g3_versions"], row["g3_explore"]
    g4, g5 = row["g4"], row["g5"]
    print(f"\n== {row['task']}: {row['queries']} judged queries; nDCG@10 raw "
          f"{row['ndcg_raw']:.4f}, worse {row['ndcg_worse']:.4f} (noise sigma "
          f"{row['sigma']:.4f}), v1 {row['ndcg_v1']:.4f}, v2 {row['ndcg_v2']:.4f} over the "
          f"traffic; plain means raw {row['ndcg_raw_mean']:.4f}, worse "
          f"{row['ndcg_worse_mean']:.4f}")
    for name, g in (("3 versions", g3v), ("raw + RandPair", g3e)):
        print(f"  g3 {name}: method {g['method']}, {g['interventions']} interventions, "
              f"max rel. error {g['max_error']:.3f}; per rank {g['error']}")
    print(f"  g4: better picked {g4['correct']:.2f}, worse called better {g4['false']:.2f}, "
          f"undecided {g4['undecided']:.2f}; candidate's win share {g4['win_share']:.3f}; "
          f"median searches {g4['median_searches']:.0f} "
          f"(p90 {g4['p90_searches']:.0f}) vs A/B {g4['ab_searches']:.0f}: "
          f"ratio {g4['ratio']:.3f}")
    print(f"  g5: bot sessions dropped {g5['bots_dropped']:.2f} of {g5['bot_sessions']:.0f}, "
          f"real sessions dropped {g5['users_dropped']:.3f}; worse called better with bots "
          f"{g5['harm']:.2f}")


def measured(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    def get(path: str, key: str) -> list[float]:
        return [float(r[path][key]) for r in rows]

    return {"g3_versions": max(get("g3_versions", "max_error")),
            "g3_explore": max(get("g3_explore", "max_error")),
            "g4_correct": min(get("g4", "correct")), "g4_false": max(get("g4", "false")),
            "g4_ratio": max(get("g4", "ratio")),
            "g5_bots_dropped": min(get("g5", "bots_dropped")),
            "g5_users_dropped": max(get("g5", "users_dropped")),
            "g5_harm": max(get("g5", "harm"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--searches", type=int, default=20_000)
    ap.add_argument("--eta", type=float, default=1.0)
    ap.add_argument("--explore", type=float, default=0.05)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--bot-runs", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.02)
    ap.add_argument("--bots", type=float, default=0.1)
    ap.add_argument("--max-searches", type=int, default=100_000)
    ap.add_argument("--tau", type=float, default=0.1,
                    help="the mixture SPRT's width over the mean outcome")
    ap.add_argument("--sessions", type=int, default=20,
                    help="session ids per kind of user (bots included)")
    ap.add_argument("--user", choices=("pbm", "cascade"), default="pbm",
                    help="the click model of the interleaving and A/B runs (g4, g5 harm); "
                    "the propensities (g3) and bot detection always use the "
                    "position-based model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    if not all((args.data_root / t).exists() for t in tasks):
        print(f"skipped: the tasks {tasks} are not all under {args.data_root}")
        return 0
    print("$ " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    rows = []
    for v in load_versions(args.data_root, tasks, args.seed):
        rows.append(one_task(v, args))
        show(rows[-1])
    write_json(args.json, {"args": vars(args), "tasks": rows})
    user = f"eta {args.eta:g}" if args.user == "pbm" else f"cascade, eta {args.eta:g}"
    emit(GOALS, measured(rows), note=f"{','.join(tasks)}, {user}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
