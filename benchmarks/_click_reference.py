"""The click statistics record by record: the loop's first implementation of
:func:`tttembed.loop.clicks.rewards.click_stats` and :func:`~tttembed.loop.clicks.rewards.
doubly_robust`, kept as the definition the array version is tested and timed against
(``tests/loop/clicks/test_stats_columns.py``, ``bench_click_stats.py``). Rows are tuples:
(task, query, doc, reward, impressions, clicks, exposure, variance, raw) and (task, query,
doc, reward, judge, disagreement, impressions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def groups(shown: Sequence[Any]) -> dict[tuple[str, str, str], list[Any]]:
    out: dict[tuple[str, str, str], list[Any]] = {}
    for s in shown:
        out.setdefault((s.task, s.query, s.doc_id), []).append(s)
    return out


def stats(shown: Sequence[Any], prop: Any, clip: float = 0.1, prior: float = 5.0
          ) -> list[tuple[Any, ...]]:
    clicks: dict[str, float] = {}
    exposure: dict[str, float] = {}
    for s in shown:
        clicks[s.task] = clicks.get(s.task, 0.0) + (1.0 if s.clicked else 0.0)
        exposure[s.task] = exposure.get(s.task, 0.0) + prop.at(s.rank, clip)
    out = []
    for key, items in groups(shown).items():
        theta = np.array([prop.at(s.rank, clip) for s in items])
        c = np.array([1.0 if s.clicked else 0.0 for s in items])
        e = float(theta.sum())
        raw = float(c.sum() / e)
        var = float(((c - raw * theta) ** 2).sum() / e ** 2)
        mean = clicks[key[0]] / max(exposure[key[0]], 1e-12)
        shrunk = float(np.clip((c.sum() + prior * mean) / (e + prior), 0.0, 1.0))
        out.append((*key, shrunk, len(items), int(c.sum()), e, var, raw))
    return out


def doubly_robust(shown: Sequence[Any], prop: Any, judge: Mapping[tuple[str, str, str], float],
                  clip: float = 0.1) -> list[tuple[Any, ...]]:
    out = []
    for key, items in groups(shown).items():
        if key not in judge:
            continue
        j = float(judge[key])
        theta = np.array([prop.at(s.rank, clip) for s in items])
        c = np.array([1.0 if s.clicked else 0.0 for s in items])
        dr = j + float(np.mean((c - theta * j) / theta))
        out.append((*key, float(np.clip(dr, 0.0, 1.0)), j, dr - j, len(items)))
    return out


def traffic(seed: int, n: int, *, tasks: int = 3, queries: int = 40, docs: int = 25
            ) -> list[Any]:
    """``n`` shown records at random: ranks 1-13 (past k = 10 too), a fifth clicked."""
    from tttembed.loop.rows import Shown

    rng = np.random.default_rng(seed)
    t, q, d = (rng.integers(m, size=n) for m in (tasks, queries, docs))
    r, c = rng.integers(1, 14, size=n), rng.random(n) < 0.2
    return [Shown(f"s{i // 10}", f"t{t[i]}", f"q{q[i]}", f"d{d[i]}", int(r[i]), bool(c[i]))
            for i in range(n)]


def blindness(shown: Sequence[Any], prop: Any, skip: frozenset[str] = frozenset()
              ) -> dict[str, float]:
    """:func:`tttembed.loop.clicks.robust.blindness` record by record."""
    from tttembed.loop.clicks.robust import MIN_SESSION_CLICKS, _z, session_of

    pair_c: dict[tuple[str, str, str], float] = {}
    pair_e: dict[tuple[str, str, str], float] = {}
    own: dict[tuple[str, tuple[str, str, str]], list[float]] = {}
    for s in shown:
        sess, key = session_of(s), (s.task, s.query, s.doc_id)
        c, e = (1.0 if s.clicked else 0.0), prop.at(s.rank, 0.1)
        mine = own.setdefault((sess, key), [0.0, 0.0])
        mine[0] += c
        mine[1] += e
        if sess not in skip:
            pair_c[key] = pair_c.get(key, 0.0) + c
            pair_e[key] = pair_e.get(key, 0.0) + e
    mean = sum(pair_c.values()) / max(sum(pair_e.values()), 1e-12)
    rows: dict[str, list[tuple[int, float, float]]] = {}
    for s in shown:
        sess, key = session_of(s), (s.task, s.query, s.doc_id)
        mc, me = own[(sess, key)] if sess not in skip else (0.0, 0.0)
        others = (pair_c.get(key, 0.0) - mc + mean) / (pair_e.get(key, 0.0) - me + 1.0)
        rows.setdefault(sess, []).append((s.rank, others, 1.0 if s.clicked else 0.0))
    return {sess: _z(np.array(r)) for sess, r in rows.items()
            if sum(x[2] for x in r) >= MIN_SESSION_CLICKS}


def sessions_traffic(seed: int, n: int) -> list[Any]:
    """``n`` shown records in sessions of 40 searches x 10 ranks: a third of the sessions
    click by relevance (a pair's fixed rate), a third always rank 1, a third at random."""
    from tttembed.loop.rows import Shown

    rng = np.random.default_rng(seed)
    rel = rng.random((40, 25))
    out = []
    for i in range(n):
        search, sess = i // 10, i // 400
        q, d, r = int(rng.integers(40)), int(rng.integers(25)), i % 10 + 1
        kind = sess % 3
        p = rel[q, d] / r if kind == 0 else (0.9 if r == 1 else 0.0) if kind == 1 else 0.1
        out.append(Shown(f"s{search}", f"t{q % 2}", f"q{q}", f"d{d}", r,
                         bool(rng.random() < p), session=f"u{sess}"))
    return out


def clean(shown: Sequence[Any], prop: Any) -> tuple[Any, ...]:
    """:func:`tttembed.loop.clicks.robust.clean_clicks` with :func:`blindness` record by
    record: the records kept."""
    from tttembed.loop.clicks.robust import BOT_Z, CAP, capped, dedupe, session_of

    kept = capped(dedupe(shown), CAP)
    dropped = frozenset(s for s, z in blindness(kept, prop).items() if z < BOT_Z)
    dropped = frozenset(s for s, z in blindness(kept, prop, dropped).items() if z < BOT_Z)
    return tuple(s for s in kept if session_of(s) not in dropped)
