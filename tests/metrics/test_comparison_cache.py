"""The comparison cache: the same p-values and intervals, read back instead of recomputed."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

import numpy as np
import pytest

from tttembed.evaluation.protocols import MethodResult
from tttembed.evaluation.report import summarise
from tttembed.metrics.stats import ComparisonCache, compare, p_value


def _scores(n: int, seed: int, shift: float = 0.0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    return {f"t{i % 3}/{i}": float(v) + shift for i, v in enumerate(rng.random(n))}


def test_cached_comparison_is_identical_and_read_back(tmp_path):
    a, b = _scores(80, 1, 0.03), _scores(80, 2)
    plain = compare(a, b, n_resamples=500, seed=3)
    cache = ComparisonCache(tmp_path)
    cold = compare(a, b, n_resamples=500, seed=3, cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    assert cold == plain
    fresh = ComparisonCache(tmp_path)  # a new process: read from disk, bit-identical floats
    assert compare(a, b, n_resamples=500, seed=3, cache=fresh) == plain
    assert (fresh.hits, fresh.misses) == (1, 0)
    assert p_value(a, b, n_resamples=500, seed=3, cache=fresh) == plain.p_value
    assert p_value(a, b, n_resamples=500, seed=3) == plain.p_value


def test_key_covers_scores_seed_resamples_and_alpha(tmp_path):
    a, b = _scores(40, 1, 0.03), _scores(40, 2)
    cache = ComparisonCache(tmp_path)
    compare(a, b, n_resamples=300, cache=cache)
    b2 = dict(b)
    b2[next(iter(b2))] += 1e-12
    for kw, bb in (({"seed": 1}, b), ({"n_resamples": 301}, b), ({"alpha": 0.1}, b), ({}, b2)):
        got = compare(a, bb, **{"n_resamples": 300, **kw}, cache=cache)
        assert got == compare(a, bb, **{"n_resamples": 300, **kw})
    assert cache.misses == 5 and cache.hits == 0


def test_corrupt_entry_is_recomputed(tmp_path):
    a, b = _scores(30, 4, 0.1), _scores(30, 5)
    cache = ComparisonCache(tmp_path)
    want = compare(a, b, n_resamples=200, cache=cache)
    (path,) = tmp_path.rglob("*.json")
    path.write_text("{not json")
    again = ComparisonCache(tmp_path)
    assert compare(a, b, n_resamples=200, cache=again) == want
    assert again.misses == 1
    assert json.loads(path.read_text())["p_value"] == want.p_value


@pytest.mark.parametrize("body", ["[]", '{"p_value": 0.5}', '{"p_value": "0.5"}',
                                  '{"mean_a": 1, "mean_b": 1, "delta": 0, "p_value": true, '
                                  '"ci_low": 0, "ci_high": 0, "n": 3}'],
                         ids=["list", "missing-fields", "string", "bool"])
def test_an_entry_of_the_wrong_shape_is_recomputed_with_a_warning(tmp_path, caplog, body):
    """Valid JSON of the wrong shape (a list, missing fields, a string or a bool where a
    number belongs) is recomputed with a warning and rewritten, never a TypeError."""
    a, b = _scores(30, 4, 0.1), _scores(30, 5)
    want = compare(a, b, n_resamples=200, cache=ComparisonCache(tmp_path))
    (path,) = tmp_path.rglob("*.json")
    path.write_text(body)
    again = ComparisonCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="tttembed.metrics.stats"):
        assert compare(a, b, n_resamples=200, cache=again) == want
    assert again.misses == 1 and "recomputing a corrupt cached comparison" in caplog.text
    assert json.loads(path.read_text()) == asdict(want)


def _results():
    raw = {"ndcg@10": _scores(60, 7), "recall@100": _scores(60, 8)}
    out = [MethodResult("fixed", "raw", raw)]
    for budget, seed in ((10, 9), (100, 10)):
        for method, gain in (("direct", 0.02), ("task", 0.05)):
            pq = {m: {k: v + gain * np.sin(seed + len(k)) for k, v in vals.items()}
                  for m, vals in raw.items()}
            out.append(MethodResult("fixed", method, pq, budget / 60, budget, {"objective": "kd"}))
    return out, raw


def test_summarise_with_the_cache_gives_the_same_tests(tmp_path):
    results, raw = _results()
    plain = summarise(results, raw, n_resamples=300)
    cache = ComparisonCache(tmp_path)
    cold = summarise(results, raw, n_resamples=300, cache=cache)
    computed = cache.misses
    assert computed > 0
    warm_cache = ComparisonCache(tmp_path)
    warm = summarise(results, raw, n_resamples=300, cache=warm_cache)
    assert warm_cache.misses == 0 and warm_cache.hits == computed
    for got in (cold, warm):
        for r0, r1 in zip(plain["rows"], got["rows"]):
            for key in ("vs_raw", "vs_direct"):
                assert r0.get(key) == r1.get(key)
            assert {t: e.get("p_raw") for t, e in r0["tasks"].items()} == \
                   {t: e.get("p_raw") for t, e in r1["tasks"].items()}
    assert any(r.get("vs_direct") for r in plain["rows"])
