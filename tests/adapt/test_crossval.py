"""Reward cross-validation and the ``auto`` alpha on synthetic tasks built to be helped
or harmed by a learned state."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tttembed.adapt.crossval import (
    ALPHA_GRID,
    CrossValidation,
    alpha_values,
    cross_validate,
    parse_alpha,
)
from tttembed.core.errors import ConfigError

DIM = 16


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def task_data(kind: str, n: int = 40, k: int = 10, seed: int = 0, task: str = "t"):
    """``helpful``: every query of the task rewards candidates along one hidden direction
    the query vectors do not know, so a shared vector generalises to held-out queries.
    ``harmful``: each query's rewards follow its own raw similarities exactly, so the raw
    vector already orders every query's candidates perfectly (nDCG 1): any learned
    vector can only tie or lose on held-out queries."""
    rng = np.random.default_rng(seed)
    h = unit(rng.normal(size=DIM))
    x = unit(rng.normal(size=(n, DIM)))
    zs, rs = [], []
    for q in range(n):
        z = unit(x[q] + 0.9 * rng.normal(size=(k, DIM)))
        s = z @ (h if kind == "helpful" else x[q])
        rs.append((s - s.min()) / (s.max() - s.min()))
        zs.append(z)
    return x, zs, rs, [f"q{q}" for q in range(n)], [task] * n


def query_data(kind: str, n: int = 12, k: int = 20, seed: int = 1):
    """Per query: ``helpful`` rewards follow a direction of its own (not its vector),
    ``harmful`` rewards follow its raw similarities (raw is perfect)."""
    rng = np.random.default_rng(seed)
    x = unit(rng.normal(size=(n, DIM)))
    zs, rs = [], []
    for q in range(n):
        z = unit(x[q] + 0.9 * rng.normal(size=(k, DIM)))
        s = z @ (unit(rng.normal(size=DIM)) if kind == "helpful" else x[q])
        rs.append((s - s.min()) / (s.max() - s.min()))
        zs.append(z)
    return x, zs, rs, [f"q{q}" for q in range(n)], ["t"] * n


@pytest.mark.parametrize("scope", ["task", "global"])
def test_auto_is_zero_when_the_state_is_harmful(scope):
    cv = cross_validate(*task_data("harmful"), scope)
    assert cv.auto() == "0"
    assert cv.queries == 40 and cv.tasks == 1
    assert cv.gain("rule").gain < 0 and cv.gain("rule").ci_high <= 0
    assert all(g.gain <= 0 for g in cv.gains)
    assert cv.gain("0") .gain == 0.0


@pytest.mark.parametrize("scope", ["task", "global"])
def test_auto_is_positive_when_the_state_helps(scope):
    cv = cross_validate(*task_data("helpful"), scope)
    assert cv.auto() != "0"
    best = cv.gain(cv.auto())
    assert best.ci_low > 0 and best.gain == max(g.gain for g in cv.gains)
    assert cv.gain("rule").gain > 0


def test_query_scope_folds_over_each_querys_candidates():
    harm = cross_validate(*query_data("harmful"), "query")
    assert harm.auto() == "0" and harm.gain("rule").gain < 0
    helps = cross_validate(*query_data("helpful"), "query")
    assert helps.auto() != "0" and helps.gain("rule").gain > 0
    assert helps.queries == 12


def test_pairwise_metric_agrees_on_the_direction():
    assert cross_validate(*task_data("harmful"), "task", metric="pairwise").auto() == "0"
    helps = cross_validate(*task_data("helpful"), "task", metric="pairwise")
    assert helps.auto() != "0" and 0.0 < helps.raw < 1.0


def test_deterministic_by_seed():
    data = task_data("helpful", n=25, seed=3)
    a = cross_validate(*data, "task", seed=7).as_dict()
    b = cross_validate(*data, "task", seed=7).as_dict()
    c = cross_validate(*data, "task", seed=8).as_dict()
    assert a == b
    assert a["gains"] != c["gains"]  # other folds and resamples


def test_tasks_are_balanced_and_groups_without_training_queries_are_not_scored():
    x1, z1, r1, q1, t1 = task_data("helpful", n=30, seed=4, task="a")
    x2, z2, r2, q2, t2 = task_data("helpful", n=1, seed=5, task="b")
    cv = cross_validate(np.concatenate([x1, x2]), z1 + z2, r1 + r2, q1 + q2, t1 + t2, "task")
    assert cv.queries == 30 and cv.tasks == 1  # task b's one query has no training query
    glob = cross_validate(np.concatenate([x1, x2]), z1 + z2, r1 + r2, q1 + q2, t1 + t2,
                          "global")
    assert glob.queries == 31 and glob.tasks == 2


def test_too_little_evidence_shrinks_to_zero():
    x, zs, rs, qids, tasks = task_data("helpful", n=3)
    one = cross_validate(x[:1], zs[:1], rs[:1], qids[:1], tasks[:1], "task")
    assert one.queries == 0 and one.auto() == "0"
    flat = [np.full(len(r), 0.5) for r in rs]  # equal rewards: no ranking information
    assert cross_validate(x, zs, flat, qids, tasks, "task").queries == 0


def test_roundtrip_and_grid():
    cv = cross_validate(*task_data("helpful", n=15), "task")
    d = cv.as_dict()
    assert CrossValidation.from_dict(d) == cv
    assert [g["alpha"] for g in d["gains"]] == list(ALPHA_GRID) and d["auto"] == cv.auto()


def test_parse_alpha_and_values():
    assert parse_alpha("rule") == "rule" and parse_alpha("AUTO") == "auto"
    assert parse_alpha("0.3") == 0.3 and parse_alpha(1) == 1.0
    with pytest.raises(ConfigError, match=re.escape("unknown alpha 'half'; choose rule")):
        parse_alpha("half")
    with pytest.raises(ConfigError, match="must lie in"):
        parse_alpha("1.5")
    n_g = np.array([1, 3, 0])
    assert np.allclose(alpha_values("rule", n_g), [0.5, 0.75, 0.0])
    assert np.allclose(alpha_values("0.3", n_g), [0.3, 0.3, 0.0])


def test_bad_arguments():
    data = task_data("helpful", n=5)
    with pytest.raises(ConfigError, match="metric"):
        cross_validate(*data, "task", metric="mrr")
    with pytest.raises(ConfigError, match="at least 2 folds"):
        cross_validate(*data, "task", folds=1)
