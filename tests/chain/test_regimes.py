"""Each training regime's other half, the negative-pool rule and the per-epoch digests."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.chain.conftest import tiny_config
from tttembed.chain.regimes import (
    REGIMES,
    epoch_rng,
    frozen_key,
    negatives,
    other_half,
    run_source,
    sample_states,
    states_digest,
)
from tttembed.chain.states import gold_states, missing_gold, n_wrong
from tttembed.core.errors import ConfigError

GOLDS = [[1, 2, 3], [4, 5], [6, 7], [8, 9, 10]]
HALF = gold_states(GOLDS)                                  # 10 gold states
POOL = [(qi, (r,)) for qi in range(4) for r in range(20, 26)] + [(0, (20, 21)), (1, (22, 4))]
WRONG = [list(range(20 + 5 * qi, 30 + 5 * qi)) for qi in range(4)]


def _other(regime, epoch, seed=5, **kw):
    return other_half(regime, epoch, seed, HALF, **kw)


def test_gold_has_no_other_half_and_a_bad_regime_is_a_config_error():
    assert _other("gold", 0) == [] and _other("gold", 3, pool=POOL) == []
    with pytest.raises(ConfigError, match="unknown regime"):
        _other("offline", 0, pool=POOL)
    with pytest.raises(ConfigError, match="unknown regime"):
        run_source("offline", 0)
    with pytest.raises(ValueError, match="pool"):
        _other("static", 0)
    with pytest.raises(ValueError, match="wrong_pool"):
        _other("synthetic", 0, golds=GOLDS)


def test_run_source_names_the_run_that_supplies_the_pool():
    assert [run_source("on-policy", e) for e in range(3)] == \
        ["states_from", "current", "current"]
    for regime in ("static", "resampled"):
        assert {run_source(regime, e) for e in range(3)} == {"states_from"}
    for regime in ("gold", "synthetic", "synthetic-resampled"):
        assert run_source(regime, 0) is None and run_source(regime, 2) is None


def test_static_reuses_one_sample_and_resampled_redraws_from_the_same_pool():
    assert len(POOL) > len(HALF)
    static = [_other("static", e, pool=POOL) for e in range(4)]
    assert all(s == static[0] for s in static)
    # the static sample is the epoch-0 draw (salt epoch 0, salt 1), as before the refactor
    assert static[0] == sample_states(POOL, len(HALF), epoch_rng(5, 0, 1))
    resampled = [_other("resampled", e, pool=POOL) for e in range(4)]
    assert resampled[0] == static[0]
    assert len({tuple(s) for s in resampled}) == 4          # a new draw every epoch
    assert resampled[2] == sample_states(POOL, len(HALF), epoch_rng(5, 2, 1))
    for s in static + resampled:
        assert len(s) == len(HALF) and len(set(s)) == len(s) and set(s) <= set(POOL)
    assert _other("static", 0, seed=6, pool=POOL) != static[0]


def test_on_policy_samples_the_given_pool_like_resampled():
    for e in range(3):
        assert _other("on-policy", e, pool=POOL) == _other("resampled", e, pool=POOL)
    fresh = POOL[:3] + [(2, (30, 31))]
    assert _other("on-policy", 1, pool=fresh) == fresh     # a small pool is taken whole
    assert _other("static", 1, pool=[]) == []


def test_synthetic_is_fixed_and_synthetic_resampled_redraws():
    kw = dict(golds=GOLDS, wrong_pool=WRONG)
    syn = [_other("synthetic", e, **kw) for e in range(3)]
    assert syn[0] and all(s == syn[0] for s in syn)
    res = [_other("synthetic-resampled", e, **kw) for e in range(3)]
    assert res[0] == syn[0]                                  # epoch 0 draws alike
    assert res[1] != res[0] and res[2] != res[1]
    for s in syn + res:
        assert 0 < len(s) <= len(HALF) and len(set(s)) == len(s)
        for qi, hist in s:
            assert n_wrong(hist, GOLDS[qi]) == 1 and missing_gold(hist, GOLDS[qi])
            (wrong,) = [r for r in hist if r not in GOLDS[qi]]
            assert wrong in WRONG[qi]
            # the rest of the history is a gold prefix, in chain order
            assert [r for r in hist if r != wrong] == GOLDS[qi][:len(hist) - 1]
    # with plenty of wrong passages the other half is as large as the gold half
    assert len(syn[0]) == len(HALF)


def test_every_regime_keeps_the_other_half_within_the_gold_half_size():
    for regime in REGIMES:
        for e in range(3):
            other = _other(regime, e, pool=POOL, golds=GOLDS, wrong_pool=WRONG)
            assert len(other) == (0 if regime == "gold" else len(HALF))
            assert all(missing_gold(h, GOLDS[qi]) for qi, h in other)


def test_states_digest_ignores_order_and_tells_sets_apart():
    a = [(0, (1, 2)), (1, ())]
    assert states_digest(a) == states_digest(a[::-1])
    assert len(states_digest(a)) == 12
    assert states_digest(a) != states_digest([(0, (2, 1)), (1, ())])
    assert states_digest(a) != states_digest(a[:1]) != states_digest([])


class _FakeFrozen:
    """Frozen encoder + search with a fixed pseudo-random ranking per state text."""

    def __init__(self, n_rows: int = 40):
        self.n_rows, self.seen, self.calls = n_rows, [], 0

    def text(self, qi, hist):
        return f"{qi}|{','.join(map(str, hist))}"

    def texts(self, states):
        return [self.text(qi, hist) for qi, hist in states]

    def ranking(self, text):
        seed = sum(ord(c) * (i + 1) for i, c in enumerate(text))
        return [int(r) for r in np.random.default_rng(seed).permutation(self.n_rows)]

    def encode(self, texts):
        self.seen.extend(texts)
        return np.arange(len(self.seen) - len(texts), len(self.seen),
                         dtype=np.float32)[:, None]

    def search(self, Q, k):
        self.calls += 1
        ids = np.array([self.ranking(self.seen[int(q[0])])[:k] for q in Q])
        return np.zeros(ids.shape, dtype=np.float32), ids


def _tops(states, shared, fake):
    from tttembed.chain.train import TrainConfig, frozen_tops

    cfg = TrainConfig(neg_depth=12, n_neg=6, shared_negatives=shared)
    return frozen_tops(states, fake, fake.encode, fake.search, cfg, {})


def test_shared_pool_is_one_question_level_pool():
    golds = [[1, 2, 3], [4, 5]]
    fake = _FakeFrozen()
    q0 = [r for r in fake.ranking("0|")[:12] if r not in golds[0]]   # question 0's pool
    # two states of question 0 whose histories hold different rows of that pool
    states = [(0, ()), (0, (1, q0[0])), (0, (q0[1], q0[3], 2)), (1, (4, 33))]
    assert [frozen_key(s, True) for s in states] == [(0, ()), (0, ()), (0, ()), (1, ())]
    assert [frozen_key(s, False) for s in states] == states
    tops = _tops(states, True, fake)
    assert fake.calls == 1 and sorted(set(fake.seen)) == ["0|", "1|"]   # one pool a question
    assert tops[0] == tops[1] == tops[2] == fake.ranking("0|")[:12]
    neg = negatives(states, golds, tops, 6).tolist()
    for (qi, hist), row in zip(states, neg):
        pool = [r for r in fake.ranking(f"{qi}|")[:12] if r not in set(golds[qi])]
        # the question's pool minus this state's own history, in frozen order
        assert row == ([r for r in pool if r not in hist] + [-1] * 6)[:6]
        assert not (set(golds[qi]) | set(hist)) & set(row)
    assert neg[0] == q0[:6] and neg[1] == q0[1:7] and neg[2] == [q0[0], q0[2], *q0[4:8]]


def test_without_shared_pool_each_state_uses_its_own_ranking():
    golds = [[1, 2, 3]]
    states = [(0, ()), (0, (1, 17)), (0, (9, 2))]
    fake = _FakeFrozen()
    tops = _tops(states, False, fake)
    for (qi, hist), top in zip(states, tops):
        assert top == fake.ranking(fake.text(qi, hist))[:12 + len(hist)]
    assert tops[1] != tops[2]
    neg = negatives(states, golds, tops, 6)
    for (qi, hist), top, row in zip(states, tops, neg.tolist()):
        assert row == [r for r in top if r not in set(golds[qi]) | set(hist)][:6]


# --- integration on the tiny dataset --------------------------------------------------

STEPS = 8      # long runs reach more states than the 9 gold ones: sampling matters


@pytest.fixture(scope="module")
def first_pool(gold_checkpoint, tiny_loaded):
    """The gold checkpoint's reached states, computed here independently of train_chain."""
    from tttembed.chain.checkpoint import load_encoder
    from tttembed.chain.search import greedy_chain
    from tttembed.chain.setup import state_texts
    from tttembed.chain.states import reached_states

    task, index, _ = tiny_loaded
    enc = load_encoder(gold_checkpoint[0], max_seq_length=48, index=index)
    texts = state_texts(task, enc.model, 48)
    run = greedy_chain(len(task.golds), texts.text, enc.encode, index.search, STEPS)
    return reached_states(run.picked, task.golds)


@pytest.mark.parametrize("regime", ["static", "resampled"])
def test_reached_regimes_sample_the_first_runs_pool(regime, gold_checkpoint, first_pool,
                                                    tiny_loaded, tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    n_gold = len(gold_states(task.golds))
    assert len(first_pool) == n_gold + 1          # one state too many: one left out a draw
    subsets = {states_digest(first_pool[:i] + first_pool[i + 1:]): i
               for i in range(len(first_pool))}
    result = train_chain(task, index, frozen_encode(emb),
                         tiny_config(regime=regime, epochs=2, steps=STEPS), tmp_path / regime,
                         states_from=gold_checkpoint[0])
    hist = result.history
    for h in hist:
        assert h["gold_states"] == n_gold and h["other_states"] == n_gold
        assert h["reached_pool"] == len(first_pool)
        assert h["pool_digest"] == states_digest(first_pool)
        assert h["other_digest"] in subsets          # drawn from the first run's pool
    same = hist[0]["other_digest"] == hist[1]["other_digest"]
    assert same if regime == "static" else not same
    saved = json.loads((tmp_path / regime / "manifest.json").read_text())["history"]
    assert [h["other_digest"] for h in saved] == [h["other_digest"] for h in hist]


def test_synthetic_resampled_redraws_each_epoch(tiny_loaded, tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    n_gold = len(gold_states(task.golds))
    hist = train_chain(task, index, frozen_encode(emb),
                       tiny_config(regime="synthetic-resampled", epochs=2),
                       tmp_path / "synres").history
    assert hist[0]["other_digest"] != hist[1]["other_digest"]
    for h in hist:
        assert 0 < h["other_states"] <= n_gold and h["reached_pool"] == 0
        assert h["pool_digest"] == states_digest([])


def test_resuming_a_checkpoint_written_without_digests(gold_checkpoint, tiny_loaded, tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    out = tmp_path / "old"
    shutil.copytree(gold_checkpoint[0], out)
    mpath = out / "manifest.json"
    manifest = json.loads(mpath.read_text())
    for h in manifest["history"]:
        del h["other_digest"], h["pool_digest"]
    mpath.write_text(json.dumps(manifest))
    hist = train_chain(task, index, frozen_encode(emb), tiny_config(regime="gold", epochs=2),
                       out).history
    assert [h["epoch"] for h in hist] == [1, 2]
    assert "other_digest" not in hist[0]
    assert hist[1]["other_digest"] == states_digest([]) and hist[1]["other_states"] == 0

