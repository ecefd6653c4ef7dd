"""noisy-qrels: judgments plus seeded noise, a reward model of known quality."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.core.errors import ConfigError
from tttembed.metrics.quality import auc, ndcg_of_order, reward_quality
from tttembed.score.base import Item, capabilities, get_scorer

QRELS = {"q1": {"d1": 2, "d2": 1, "d3": 0}, "q2": {"d4": 2}}
DOCS = [Item(f"d{i}", "") for i in range(1, 40)]


def scorer(spec: str = "noisy-qrels:", **kw):
    return get_scorer(spec, qrels=QRELS, **kw)


def test_sigma_zero_is_qrels_exactly():
    clean = get_scorer("qrels:", qrels=QRELS)
    for q in ("q1", "q2", "q9"):
        assert np.array_equal(scorer("noisy-qrels:?sigma=0&seed=3").score(Item(q, ""), DOCS),
                              clean.score(Item(q, ""), DOCS))


def test_deterministic_by_seed_and_independent_of_order_and_batching():
    s = scorer("noisy-qrels:?sigma=0.3&seed=7")
    a = s.score(Item("q1", ""), DOCS)
    b = scorer("noisy-qrels:?sigma=0.3&seed=7").score(Item("q1", ""), DOCS[::-1])[::-1]
    c = np.concatenate([s.score(Item("q1", ""), DOCS[:5]), s.score(Item("q1", ""), DOCS[5:])])
    assert np.array_equal(a, b) and np.array_equal(a, c)
    other = scorer("noisy-qrels:?sigma=0.3&seed=8").score(Item("q1", ""), DOCS)
    assert not np.array_equal(a, other)


def test_rewards_clipped_to_unit_interval():
    r = scorer("noisy-qrels:?sigma=1.0").score(Item("q1", ""), DOCS)
    assert r.min() >= 0.0 and r.max() <= 1.0
    assert (r == 0.0).any() and (r == 1.0).any()  # large noise hits both bounds


def test_noise_has_the_asked_spread():
    docs = [Item(f"x{i}", "") for i in range(4000)]
    r = scorer("noisy-qrels:?sigma=0.1&seed=1").score(Item("q2", ""), docs)
    # clean reward 0: clip(N(0, 0.1^2)) -> half exactly 0, the rest a half-normal
    assert (r == 0).mean() == pytest.approx(0.5, abs=0.03)
    assert np.sqrt(np.mean(r ** 2) * 2) == pytest.approx(0.1, rel=0.05)


def test_flip_rate_is_about_p():
    docs = [Item(f"x{i}", "") for i in range(5000)]
    r = scorer("noisy-qrels:?flip=0.2&seed=4").score(Item("q1", ""), docs)
    assert set(np.unique(r)) <= {0.0, 1.0}
    assert r.mean() == pytest.approx(0.2, abs=0.02)  # unjudged (0) flipped to 1
    top = scorer("noisy-qrels:?flip=1").score(Item("q1", ""), DOCS[:3])
    assert top.tolist() == [0.0, 0.5, 1.0]


def test_options_as_keywords_and_errors():
    s = scorer(sigma=0.2, seed=1)
    assert (s.sigma, s.seed, s.flip) == (0.2, 1, 0.0)
    assert "sigma=0.2" in s.identity and "seed=1" in s.label_identity
    assert capabilities("noisy-qrels:").uses_labels
    for bad in ("noisy-qrels:?sigma=x", "noisy-qrels:?sigma=-1", "noisy-qrels:?flip=2",
                "noisy-qrels:?noise=1", "noisy-qrels:?sigma=1&sigma=2", "noisy-qrels:?sigma"):
        with pytest.raises(ConfigError):
            scorer(bad)
    with pytest.raises(ConfigError):
        scorer("noisy-qrels:?sigma=0.1", sigma=0.2)


def test_reads_a_qrels_file(tmp_path):
    f = tmp_path / "q.tsv"
    f.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    s = get_scorer(f"noisy-qrels:{f}?sigma=0")
    assert s.score(Item("q1", ""), [Item("d1", ""), Item("d2", "")]).tolist() == [1.0, 0.0]


def test_reward_quality_numbers():
    assert auc([0.9, 0.1, 0.5], [True, False, False]) == 1.0
    assert auc([0.5, 0.5], [True, False]) == 0.5
    assert np.isnan(auc([0.1], [True]))
    assert ndcg_of_order([0.9, 0.1], [0, 1]) < 1.0 == ndcg_of_order([0.1, 0.9], [0, 1])
    q = reward_quality({"t/q1": {"d1": 0.9, "d2": 0.2, "d3": 0.1}},
                       {"t": {"q1": {"d1": 2, "d2": 0}}})
    assert q["auc"] == 1.0 and q["ndcg"] == 1.0 and q["pairs"] == 3
