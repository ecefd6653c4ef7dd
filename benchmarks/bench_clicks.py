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

``--server``: the through-the-server goals, against real ``tttembed serve --index I
--registry DIR --learn`` processes on 127.0.0.1 (the server, its learner child and the
store as deployed; nothing faked). One query stream per task (Zipf, exponent 1, over the
judged test queries; ``--searches`` long, seeded) is replayed once per condition as
single-query ``POST /v1/search`` calls (k = 10) from ``--clients`` threads; every
search is one simulated user (its own session id) clicking by the position-based model
above (1/r^eta, attraction 0.1 + 0.8 * grade / top grade; the click draws seeded by the
search's position in the stream, so two conditions that serve the same list draw the
same clicks), posted at once to ``POST /v1/events`` in the short form
(``{"search_id", "doc_id", "type": "click", "session_id"}``). The stream is cut into
``--windows`` windows; after each the benchmark waits until the learner has read the
window's clicks (``--click-settle-s``, default 1 s: a search's clicks are read 1 s after
it, not the server's 300 s) and no cycle runs. Conditions: ``--judge none --clicks ips``
and ``--clicks naive`` at each ``--etas`` value, and the same loop with a judge instead
of clicks (``--clicks off``): the loopback rerank server of ``bench_loop_gain.py``
scoring a pair 1 when the qrels grade it > 0 else 0, plus N(0, ``--sigma``^2) noise,
clipped (what ``noisy-qrels:?sigma=0.2`` does by query id, by query text), with a
``--judge-budget`` pair budget. "Served nDCG@10" is the nDCG@10 of the lists the
server returned, from the qrels; per query, averaged over its searches in a window.

- g1: clicks only (ips, eta 1): served nDCG@10 of the last window above the first,
  paired sign-flip over the queries searched in both, p < 0.05; and its gain at least
  half of the judge loop's gain over the same windows of the same stream;
- g2: at each eta, ips above naive in the last window (paired over its queries, the
  same for both: one stream), p < 0.05; naive's own first-to-last change reported.
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
from _support import DATA, log_tail, pct, write_json
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


# -- --server: the loop through a real server over HTTP ------------------------------------------
def server_goals(etas: Sequence[float]) -> dict[str, Goal]:
    out = {
        "g1_p": Goal("clicks (server): clicks only (ips, eta 1), served nDCG@10 last window "
                     "> first, paired sign-flip p", "<=", 0.05),
        "g1_gain": Goal("clicks (server): clicks-only served nDCG@10 gain, last window - "
                        "first", "info", None),
        "judge_gain": Goal("clicks (server): the judge loop's served nDCG@10 gain (noisy "
                           "qrels by text, sigma 0.2), last window - first", "info", None),
        "g1_share": Goal("clicks (server): clicks-only gain / the judge loop's gain", ">=",
                         0.5),
    }
    for e in etas:
        t = f"eta {e:g}"
        out[f"g2_p_{e:g}"] = Goal(f"clicks (server): ips > naive, served nDCG@10 of the last "
                                  f"window, {t}, paired sign-flip p", "<=", 0.05)
        out[f"g2_diff_{e:g}"] = Goal(f"clicks (server): ips - naive, served nDCG@10 of the "
                                     f"last window, {t}", "info", None)
        out[f"naive_gain_{e:g}"] = Goal(f"clicks (server): naive's served nDCG@10 change, "
                                        f"last window - first, {t}", "info", None)
        out[f"ips_gain_{e:g}"] = Goal(f"clicks (server): ips's served nDCG@10 change, last "
                                      f"window - first, {t}", "info", None)
    return out


@dataclass(frozen=True)
class Condition:
    """One server run: ``clicks`` ips | naive (``--judge none``), or ``judge`` (the
    noisy judge, clicks off); ``eta`` the users' examination exponent."""

    clicks: str
    eta: float

    @property
    def name(self) -> str:
        return "judge" if self.clicks == "judge" else f"{self.clicks}-eta{self.eta:g}"


@dataclass
class Search:
    """One search of the replay, as served and clicked."""

    i: int
    qid: str
    window: int
    ok: bool
    version: str | None = None
    ids: tuple[str, ...] = ()
    clicks: int = 0
    stored: int = 0
    latency: float = 0.0
    error: str = ""


class Client:
    """One httpx client per thread: a search, its user's clicks, the loop's status."""

    def __init__(self, url: str, task: str) -> None:
        import threading

        self.url, self.task = url, task
        self._local = threading.local()

    def http(self) -> Any:
        import httpx

        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = httpx.Client(base_url=self.url, timeout=120.0)
        return c

    def status(self) -> dict[str, Any]:
        r = self.http().get("/v1/loop")
        r.raise_for_status()
        return dict(r.json())


@dataclass
class Replay:
    """A task's judged queries, its stream and the users' click model."""

    data: Any  # _loop_support.TaskData
    stream: list[str]
    top: float
    seed: int
    ndcg_cache: dict[tuple[str, tuple[str, ...]], float]

    def ndcg(self, qid: str, ids: Sequence[str]) -> float:
        from tttembed.metrics.ranking import ndcg_at_k

        key = (qid, tuple(ids))
        if key not in self.ndcg_cache:
            run = {qid: {d: float(K - r) for r, d in enumerate(ids)}}
            self.ndcg_cache[key] = float(ndcg_at_k({qid: dict(self.data.qrels[qid])}, run,
                                                   K).get(qid, 0.0))
        return self.ndcg_cache[key]


def one_search(client: Client, rp: Replay, cond: Condition, i: int, window: int,
               post_clicks: bool) -> Search:
    """Search ``rp.stream[i]``; the user's clicks posted to /v1/events."""
    qid = rp.stream[i]
    t0 = time.perf_counter()
    try:
        r = client.http().post("/v1/search", json={"queries": [rp.data.queries[qid]],
                                                   "task": client.task, "k": K})
        if r.status_code != 200:
            return Search(i, qid, window, False, error=f"search {r.status_code} {r.text[:200]}")
        body = r.json()
        item = body["data"][0]
        ids = tuple(item["ids"])
        s = Search(i, qid, window, True, body.get("version"), ids)
        if post_clicks and ids:
            user = sim.PositionBased(eta=cond.eta, top=rp.top)
            rng = np.random.default_rng([rp.seed, i])
            hit = user.clicks(sim.grades_of(ids, rp.data.qrels[qid]), rng)
            events = [{"search_id": item["search_id"], "doc_id": d, "type": "click",
                       "session_id": f"user-{i}"} for d, c in zip(ids, hit) if c]
            s.clicks = len(events)
            if events:
                e = client.http().post("/v1/events", json=events)
                if e.status_code != 202:
                    s.ok, s.error = False, f"events {e.status_code} {e.text[:200]}"
                else:
                    s.stored = int(e.json()["stored"])
        s.latency = time.perf_counter() - t0
        return s
    except Exception as exc:  # noqa: BLE001  (a failed request is a measured outcome)
        return Search(i, qid, window, False, error=f"{type(exc).__name__}: {exc}")


def settle(client: Client, since: float, stored: int, judged: bool, args: argparse.Namespace
           ) -> dict[str, Any]:
    """Wait until the learner is done with the traffic so far: not learning, for
    ``--settle`` s in a row of statuses written after ``since`` + the click settle time,
    and (clicks) every stored click read, or (judge) idle. Past ``--idle-timeout`` s, the
    status as it is (``settled`` False)."""
    from _loop_support import _epoch

    deadline = time.monotonic() + args.idle_timeout
    calm_from: float | None = None
    s: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            s = client.status()
        except Exception:  # noqa: BLE001  (retry until the deadline)
            time.sleep(0.5)
            continue
        fresh = _epoch(s.get("updated")) >= since + args.click_settle_s + 1.0
        read = int((s.get("learner_clicks") or {}).get("read", 0))
        done = s.get("idle") if judged else read >= stored
        if fresh and done and not s.get("learning"):
            calm_from = calm_from or time.monotonic()
            if time.monotonic() - calm_from >= args.settle:
                return {**s, "settled": True}
        else:
            calm_from = None
        if (s.get("learner") or {}).get("error"):
            print(f"   learner error: {s['learner']['error']}")
        time.sleep(0.2)
    return {**s, "settled": False}


def window_row(rp: Replay, searches: Sequence[Search], status: Mapping[str, Any],
               n: int, wall: float) -> dict[str, Any]:
    ok = [s for s in searches if s.ok]
    per: dict[str, list[float]] = {}
    for s in ok:
        per.setdefault(s.qid, []).append(rp.ndcg(s.qid, s.ids))
    clicks = status.get("learner_clicks") or {}
    prop = clicks.get("propensities") or {}
    last = status.get("last_cycle") or {}
    return {"window": n, "searches": len(searches), "failed": len(searches) - len(ok),
            "errors": sorted({s.error for s in searches if s.error})[:3],
            "ndcg_traffic": float(np.mean([rp.ndcg(s.qid, s.ids) for s in ok])) if ok
            else float("nan"),
            "per_query": {q: float(np.mean(v)) for q, v in per.items()},
            "versions": sorted({s.version or "raw" for s in ok}),
            "served": status.get("version") or "raw", "cycles": status.get("cycles"),
            "clicks_posted": sum(s.clicks for s in searches),
            "clicks_stored": sum(s.stored for s in searches),
            "clicks_read": clicks.get("read"), "propensity_method": prop.get("method"),
            "theta": [round(t, 3) for t in prop.get("theta", [])],
            "pairs_judged": status.get("pairs_judged"),
            "last_cycle": last.get("reason", ""), "settled": status.get("settled"),
            "p50_ms": pct([s.latency for s in ok], 50), "wall_s": round(wall, 1)}


def print_window(cond: Condition, r: Mapping[str, Any]) -> None:
    q = r["per_query"]
    print(f"  {cond.name:<10} w{r['window']:<2} nDCG@10 {r['ndcg_traffic']:.4f} (traffic), "
          f"{np.mean(list(q.values())):.4f} over {len(q)} queries; served "
          f"{'+'.join(r['versions'])} -> {r['served']}; cycles {r['cycles']}; clicks "
          f"{r['clicks_stored']} stored, {r['clicks_read']} read so far; judge pairs "
          f"{r['pairs_judged']}; propensities {r['propensity_method']}; p50 "
          f"{r['p50_ms']:.0f} ms; {r['failed']} failed; {r['wall_s']} s"
          + ("" if r["settled"] else "  (learner not settled at the timeout)"))
    for e in r["errors"]:
        print(f"      error: {e}")
    if r["last_cycle"]:
        print(f"      last cycle: {r['last_cycle'][:160]}")
    sys.stdout.flush()


def serve_args(cond: Condition, args: argparse.Namespace, data_path: Path,
               judge_url: str | None) -> list[str]:
    common = ["--learn", "--learn-every", str(args.learn_every), "--min-queries",
              str(args.min_queries), "--corpus", str(data_path)]
    if cond.clicks == "judge":
        return [*common, "--judge", f"rerank:judge@{judge_url}", "--judge-budget",
                str(args.judge_budget), "--judge-rpm", "1000000", "--clicks", "off"]
    return [*common, "--judge", "none", "--clicks", cond.clicks, "--click-settle-s",
            str(args.click_settle_s)]


def run_condition(cond: Condition, rp: Replay, index: Path, data_path: Path,
                  args: argparse.Namespace, work: Path, judge_url: str | None
                  ) -> dict[str, Any]:
    """One fresh registry and server for ``cond``; the stream replayed window by window."""
    from concurrent.futures import ThreadPoolExecutor

    from _loop_support import CHILDREN, start_serve

    t0 = time.perf_counter()
    folder = work / cond.name
    folder.mkdir(parents=True)
    server = start_serve(index, folder / "registry", folder,
                         serve_args(cond, args, data_path, judge_url), "serve")
    client = Client(server.url, rp.data.name)
    rows: list[dict[str, Any]] = []
    bounds = np.linspace(0, len(rp.stream), args.windows + 1).astype(int)
    judged = cond.clicks == "judge"
    stored = 0
    try:
        deadline = time.monotonic() + 180
        while not client.status()["learner"]["running"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"{cond.name}: the learner never started; "
                                 f"{folder / 'serve.log'}:\n{log_tail(folder / 'serve.log')}")
            time.sleep(0.3)
        with ThreadPoolExecutor(args.clients) as pool:
            for n in range(args.windows):
                w0 = time.perf_counter()
                idx = range(bounds[n], bounds[n + 1])
                searches = list(pool.map(
                    lambda i, n=n: one_search(client, rp, cond, i, n + 1, not judged), idx))
                stored += sum(s.stored for s in searches)
                status = settle(client, time.time(), stored, judged, args)
                rows.append(window_row(rp, searches, status, n + 1,
                                       time.perf_counter() - w0))
                print_window(cond, rows[-1])
        final = client.status()
    finally:
        CHILDREN.stop(server.proc)
    return {"condition": cond.name, "clicks": cond.clicks, "eta": cond.eta, "rows": rows,
            "versions": [{"version": v["version"], "promoted": v["promoted"],
                          "reason": v["reason"][:300], "pairs": v.get("pairs")}
                         for v in final.get("versions", [])],
            "promotions": sum(1 for h in final.get("history", [])
                              if h.get("action") == "promote"),
            "pairs_judged": final.get("pairs_judged"),
            "learner_clicks": final.get("learner_clicks"),
            "last_selection": last_selection(folder / "registry"),
            "seconds": time.perf_counter() - t0}


def last_selection(registry: Path) -> dict[str, Any]:
    """The newest registered version's method-auto choice, evidence and notes (why the
    guard kept raw, or what it chose), from its state file."""
    import json

    versions = sorted((registry / "versions").glob("v*/vectors.json"),
                      key=lambda p: int(p.parent.name[1:]) if p.parent.name[1:].isdigit()
                      else -1)
    if not versions:
        return {}
    sel = json.loads(versions[-1].read_text()).get("selection") or {}
    return {"version": versions[-1].parent.name, "choice": sel.get("choice"),
            "evidence": sel.get("evidence"), "notes": sel.get("notes")}


def paired(a: Mapping[str, float], b: Mapping[str, float], seed: int) -> dict[str, Any]:
    """mean(a) - mean(b) over the queries in both, its sign-flip p (two-sided) and the
    one-sided p of the goal (a above b: p when the difference is positive, else 1)."""
    from tttembed.metrics.stats import paired_randomization_test

    qs = sorted(set(a) & set(b))
    x, y = np.array([a[q] for q in qs]), np.array([b[q] for q in qs])
    diff = float(x.mean() - y.mean()) if qs else float("nan")
    p = float(paired_randomization_test(x, y, 20000, seed)) if len(qs) > 1 else 1.0
    return {"queries": len(qs), "a": float(x.mean()) if qs else None,
            "b": float(y.mean()) if qs else None, "diff": diff, "p": p,
            "p_goal": p if diff > 0 else 1.0, "better": int((x - y > 1e-9).sum()),
            "worse": int((y - x > 1e-9).sum())}


def gain(run: Mapping[str, Any], seed: int) -> dict[str, Any]:
    rows = run["rows"]
    return paired(rows[-1]["per_query"], rows[0]["per_query"], seed)


def server_index(data_path: Path, args: argparse.Namespace, work: Path) -> Path:
    """The task's index (``--index-root``/TASK, built once when absent)."""
    import subprocess

    from _loop_support import server_env
    from _support import cli

    root = args.index_root or Path(tempfile_dir()) / "bench-clicks-index"
    out = root / data_path.name
    if (out / "manifest.json").exists() or (out / "CURRENT").exists():
        return out
    print(f"indexing {data_path} into {out} (once; reused from --index-root)")
    subprocess.run(cli("index", str(data_path), "-o", str(out), "--quiet"), check=True,
                   env=server_env(work / "index-cache"))
    return out


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


def conditions(args: argparse.Namespace) -> list[Condition]:
    """The judge run (when ``--judge-budget`` > 0), then ips and naive at each eta;
    ``--only`` keeps those named."""
    conds = [Condition("judge", 1.0)] if args.judge_budget > 0 else []
    conds += [Condition(m, e) for e in args.etas for m in ("ips", "naive")]
    if args.only:
        keep = set(args.only.split(","))
        unknown = keep - {c.name for c in conds}
        if unknown:
            raise SystemExit(f"--only: no condition {sorted(unknown)} (there are "
                             f"{', '.join(c.name for c in conds)})")
        conds = [c for c in conds if c.name in keep]
    return conds


def server_task(task: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from _loop_support import load_data
    from _support import loopback_servers
    from bench_loop_gain import Judge

    data_path = args.data_root / task
    data = load_data(data_path, "test")
    index = server_index(data_path, args, work)
    qids = sorted(data.queries)
    stream = sim.zipf_queries(qids, args.searches, np.random.default_rng(args.seed))
    top = float(max(g for q in data.qrels.values() for g in q.values()))
    rp = Replay(data, stream, top, args.seed, {})
    conds = conditions(args)
    print(f"\n== {data.name} (server): {len(qids)} judged queries, {args.searches} searches "
          f"({len(set(stream))} distinct queries) in {args.windows} windows, "
          f"{args.clients} clients; click settle {args.click_settle_s:g} s, learn every "
          f"{args.learn_every}, min queries {args.min_queries}; judge: sigma {args.sigma:g}, "
          f"{args.judge_budget} pairs; conditions {', '.join(c.name for c in conds)}")
    runs: dict[str, dict[str, Any]] = {}
    judge = Judge(data, args.sigma, args.seed)
    with loopback_servers().LocalOpenAIServer(rerank=judge) as rerank:
        for c in conds:
            runs[c.name] = run_condition(c, rp, index, data_path, args, work / data.name,
                                         rerank.url if c.clicks == "judge" else None)
            print(f"  {c.name}: {runs[c.name]['promotions']} promotions, "
                  f"{runs[c.name]['seconds']:.0f} s")
    out = summarise({"task": data.name, "queries": len(qids), "searches": args.searches,
                     "windows": args.windows, "runs": runs,
                     "judge_pairs_scored": judge.pairs}, args.seed)
    show_server(out)
    return out


def summarise(task: dict[str, Any], seed: int) -> dict[str, Any]:
    """``task`` (its runs) with the paired comparisons: each run's last window against its
    first, and ips against naive in the last window at each eta both ran."""
    runs = task["runs"]
    task["gains"] = {name: gain(r, seed) for name, r in runs.items()}
    etas = sorted({r["eta"] for r in runs.values() if r["clicks"] == "ips"} &
                  {r["eta"] for r in runs.values() if r["clicks"] == "naive"})
    task["ips_vs_naive"] = {f"{e:g}": paired(runs[f"ips-eta{e:g}"]["rows"][-1]["per_query"],
                                             runs[f"naive-eta{e:g}"]["rows"][-1]["per_query"],
                                             seed) for e in etas}
    return task


def show_server(out: Mapping[str, Any]) -> None:
    print(f"\n  {out['task']}: served nDCG@10, window 1 -> window {out['windows']} (paired "
          "over the queries searched in both):")
    for name, g in out["gains"].items():
        print(f"    {name:<10} {g['b']:.4f} -> {g['a']:.4f} ({g['diff']:+.4f}, "
              f"{g['better']} better / {g['worse']} worse of {g['queries']}, p = "
              f"{g['p']:.4g}); {out['runs'][name]['promotions']} promotions")
    for e, g in out["ips_vs_naive"].items():
        print(f"    last window, eta {e}: ips {g['a']:.4f} vs naive {g['b']:.4f} "
              f"({g['diff']:+.4f}, {g['better']} / {g['worse']} of {g['queries']}, p = "
              f"{g['p']:.4g})")


def server_measured(tasks: Sequence[Mapping[str, Any]], etas: Sequence[float]
                    ) -> dict[str, float | None]:
    """The goals over the tasks: the weakest task's value (None where a task lacks the
    runs a goal needs)."""
    def worst(vals: list[float | None], hi: bool) -> float | None:
        got = [v for v in vals if v is not None and np.isfinite(v)]
        if len(got) < len(vals) or not got:
            return None
        return max(got) if hi else min(got)

    def field(g: Mapping[str, Any] | None, key: str) -> float | None:
        return None if g is None else g[key]

    g1 = [t["gains"].get("ips-eta1") for t in tasks]
    judge = [t["gains"].get("judge") for t in tasks]
    shares = [None if a is None or j is None or not j["diff"] > 0 else a["diff"] / j["diff"]
              for a, j in zip(g1, judge)]
    out: dict[str, float | None] = {
        "g1_p": worst([field(g, "p_goal") for g in g1], True),
        "g1_gain": worst([field(g, "diff") for g in g1], False),
        "judge_gain": worst([field(g, "diff") for g in judge], False),
        "g1_share": worst(shares, False)}
    for e in etas:
        vs = [t["ips_vs_naive"].get(f"{e:g}") for t in tasks]
        out[f"g2_p_{e:g}"] = worst([field(g, "p_goal") for g in vs], True)
        out[f"g2_diff_{e:g}"] = worst([field(g, "diff") for g in vs], False)
        out[f"naive_gain_{e:g}"] = worst([field(t["gains"].get(f"naive-eta{e:g}"), "diff")
                                          for t in tasks], True)
        out[f"ips_gain_{e:g}"] = worst([field(t["gains"].get(f"ips-eta{e:g}"), "diff")
                                        for t in tasks], False)
    return out


def merged(paths: Sequence[Path], seed: int) -> list[dict[str, Any]]:
    """The tasks of earlier ``--server --json`` files, each task's runs put together (a
    condition in two files: the later file's)."""
    import json

    tasks: dict[str, dict[str, Any]] = {}
    for path in paths:
        got = json.loads(path.read_text())
        for t in got["tasks"]:
            t.setdefault("searches", got["args"]["searches"])  # files before these keys
            t.setdefault("windows", got["args"]["windows"])
            into = tasks.setdefault(t["task"], {**t, "runs": {}})
            if (into["searches"], into["windows"]) != (t["searches"], t["windows"]):
                raise SystemExit(f"{path}: {t['task']} was run with another stream "
                                 f"({t['searches']} searches, {t['windows']} windows)")
            into["runs"].update(t["runs"])
            into["judge_pairs_scored"] = max(into.get("judge_pairs_scored", 0),
                                             t.get("judge_pairs_scored", 0))
    return [summarise(t, seed) for t in tasks.values()]


def server_main(args: argparse.Namespace, tasks: Sequence[str]) -> int:
    import os
    import shutil
    import signal
    import tempfile

    from _loop_support import CHILDREN, _terminate

    if args.from_json:
        rows = [t for t in merged(args.from_json, args.seed) if t["task"] in tasks]
        for t in rows:
            show_server(t)
        searches = sorted({t["searches"] for t in rows})
        etas = sorted({r["eta"] for t in rows for r in t["runs"].values()
                       if r["clicks"] != "judge"})
    else:
        signal.signal(signal.SIGTERM, _terminate)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        work = Path(tempfile.mkdtemp(prefix="bench-clicks-server-"))
        try:
            rows = [server_task(t, args, work) for t in tasks]
        finally:
            CHILDREN.stop_all()
            if args.keep is not None:
                shutil.copytree(work, args.keep, dirs_exist_ok=True)
            shutil.rmtree(work, ignore_errors=True)
        searches, etas = [args.searches], list(args.etas)
    write_json(args.json, {"args": vars(args), "tasks": rows})
    emit(server_goals(etas), server_measured(rows, etas),
         note=f"{','.join(t['task'] for t in rows)}, "
              f"{'/'.join(str(n) for n in searches)} searches, click settle "
              f"{args.click_settle_s:g} s")
    return 0


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
    srv = ap.add_argument_group("--server: the loop through tttembed serve over HTTP")
    srv.add_argument("--server", action="store_true", help="measure g1/g2 through real "
                     "servers (module docstring) instead of the offline goals")
    srv.add_argument("--windows", type=int, default=10)
    srv.add_argument("--etas", type=lambda s: [float(x) for x in s.split(",") if x],
                     default=[1.0, 2.0], help="examination exponents of the ips/naive runs")
    srv.add_argument("--clients", type=int, default=2, help="threads sending the searches")
    srv.add_argument("--click-settle-s", type=float, default=1.0,
                     help="the server's --click-settle-s")
    srv.add_argument("--learn-every", type=int, default=1000,
                     help="the server's --learn-every (clicks, or judge rewards)")
    srv.add_argument("--min-queries", type=int, default=20, help="the server's --min-queries")
    srv.add_argument("--judge-budget", type=int, default=4000,
                     help="the judge loop's pairs (0: no judge run, goal 1's share n/a)")
    srv.add_argument("--sigma", type=float, default=0.2, help="the judge's noise")
    srv.add_argument("--settle", type=float, default=2.0, help="seconds the learner must "
                     "stay done before a window counts as settled")
    srv.add_argument("--idle-timeout", type=float, default=600.0,
                     help="most seconds to wait for the learner after a window")
    srv.add_argument("--index-root", type=Path, default=None, help="folder of the tasks' "
                     "indexes (TASK/ under it; built once when absent; default: the "
                     "temp folder's bench-clicks-index)")
    srv.add_argument("--keep", type=Path, default=None, help="copy the work folder "
                     "(registries, logs) here")
    srv.add_argument("--only", default="", help="run only these conditions (judge, "
                     "ips-eta1, naive-eta1, ...; comma-separated)")
    srv.add_argument("--from-json", type=lambda s: [Path(x) for x in s.split(",") if x],
                     default=None, help="start no server: put the runs of earlier --server "
                     "--json files together (by task) and report the goals on them")
    args = ap.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    if not all((args.data_root / t).exists() for t in tasks):
        print(f"skipped: the tasks {tasks} are not all under {args.data_root}")
        return 0
    print("$ " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    if args.server:
        return server_main(args, tasks)
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
