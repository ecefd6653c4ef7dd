"""The click statistics computed over arrays (:func:`click_stats`, :func:`doubly_robust`)
give what the per-record definitions give (``benchmarks/_click_reference.py``: the loop's
first, record-by-record implementation), on random traffic with several tasks, ranks past k,
clipped propensities and pairs the judge never scored."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tttembed.loop.clicks.propensity import Propensities
from tttembed.loop.clicks.rewards import click_stats, doubly_robust

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import _click_reference as ref  # noqa: E402

PROP = Propensities((1.0, 0.7, 0.5, 0.4, 0.3, 0.2, 0.15, 0.12, 0.08, 0.05),
                    (1.0,) * 10, (1.0,) * 10, 0, "em")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_stats_over_arrays_equal_the_per_record_definition(seed):
    shown = ref.traffic(seed, 3000)
    got = [(s.task, s.query, s.doc_id, s.reward, s.impressions, s.clicks, s.exposure,
            s.variance, s.raw) for s in click_stats(shown, PROP, clip=0.1, prior=5.0)]
    want = ref.stats(shown, PROP, 0.1, 5.0)
    assert [g[:3] for g in got] == [w[:3] for w in want]  # same pairs, same order
    assert [g[4:6] for g in got] == [w[4:6] for w in want]
    np.testing.assert_allclose([g[3:4] + g[6:] for g in got], [w[3:4] + w[6:] for w in want],
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("seed", [0, 3])
def test_the_doubly_robust_estimate_over_arrays_equals_the_per_record_definition(seed):
    shown = ref.traffic(seed, 3000)
    rng = np.random.default_rng(seed + 10)
    keys = sorted({(s.task, s.query, s.doc_id) for s in shown})
    judge = {k: float(rng.integers(0, 2)) for k in keys if rng.random() < 0.5}
    got = [(d.task, d.query, d.doc_id, d.reward, d.judge, d.disagreement, d.impressions)
           for d in doubly_robust(shown, PROP, judge, clip=0.1)]
    want = ref.doubly_robust(shown, PROP, judge, 0.1)
    assert [g[:3] for g in got] == [w[:3] for w in want] and len(got) < len(keys)
    assert [g[6] for g in got] == [w[6] for w in want]
    np.testing.assert_allclose([g[3:6] for g in got], [w[3:6] for w in want],
                               rtol=1e-12, atol=1e-12)


def test_nothing_shown_gives_no_stats():
    assert click_stats([], PROP) == [] and doubly_robust([], PROP, {("t", "q", "d"): 1.0}) == []


@pytest.mark.parametrize("seed", [0, 1])
def test_blindness_over_arrays_equals_the_per_record_definition(seed):
    """Sessions of three kinds (clicks by relevance, always rank 1, at random), with and
    without the first pass's document-blind sessions skipped: the same sessions scored,
    the same z-scores."""
    from tttembed.loop.clicks.robust import BOT_Z, blindness

    shown = ref.sessions_traffic(seed, 40_000)
    got, want = blindness(shown, PROP), ref.blindness(shown, PROP)
    assert list(got) == list(want) and len(got) > 50
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-9, atol=1e-9)
    skip = frozenset(s for s, z in want.items() if z < BOT_Z)
    assert 0 < len(skip) < len(want)
    got, want = blindness(shown, PROP, skip), ref.blindness(shown, PROP, skip)
    assert list(got) == list(want)
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-9, atol=1e-9)
