from __future__ import annotations

import json

import numpy as np
import pytest

from tests.chain.conftest import tiny_config
from tttembed.chain.regimes import (
    epoch_rng,
    info_nce,
    negatives,
    positives,
    sample_states,
    synthetic_states,
)
from tttembed.chain.states import gold_states, missing_gold, n_wrong
from tttembed.core.errors import ConfigError


def test_positive_is_earliest_missing_gold():
    golds = [[1, 2, 3]]
    assert positives([(0, ()), (0, (1, 7)), (0, (2, 7)), (0, (1, 3))], golds).tolist() == \
        [1, 2, 1, 2]
    with pytest.raises(ValueError):
        positives([(0, (1, 2, 3))], golds)


def test_negative_rule_excludes_all_gold_and_history():
    golds = [[1, 2, 3]]
    tops = [[2, 9, 1, 8, 7, 3, 6, 5]]
    neg = negatives([(0, (1, 9))], golds, tops, 3)
    assert neg.tolist() == [[8, 7, 6]]          # frozen order, gold and history removed
    assert negatives([(0, ())], golds, [[1, 4]], 3).tolist() == [[4, -1, -1]]


def test_info_nce_matches_the_formula_and_masks_padding():
    import torch

    rng = np.random.default_rng(0)
    P = rng.normal(size=(6, 4)).astype(np.float32)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q = rng.normal(size=(2, 4)).astype(np.float32) * 0.2
    q = torch.tensor(Q, requires_grad=True)
    pos = torch.tensor([0, 3])
    neg = torch.tensor([[1, 2, -1], [4, 5, 1]])
    loss = info_nce(q, torch.from_numpy(P), pos, neg, 0.05)
    qn = Q.astype(np.float64)
    expected = []
    for i, (p, ns) in enumerate([(0, [1, 2]), (3, [4, 5, 1])]):
        logits = np.array([qn[i] @ P[r] for r in [p, *ns]]) / 0.05
        expected.append(-(logits[0] - np.log(np.exp(logits).sum())))
    assert float(loss.detach()) == pytest.approx(np.mean(expected), rel=1e-4)
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_state_sampling_is_seeded_and_synthetic_states_hold_one_wrong_passage():
    pool = [(i, ()) for i in range(20)]
    a = sample_states(pool, 5, epoch_rng(1, 2))
    assert a == sample_states(pool, 5, epoch_rng(1, 2)) and len(a) == 5
    assert a != sample_states(pool, 5, epoch_rng(1, 3))
    assert sample_states(pool[:3], 5, epoch_rng(0, 0)) == pool[:3]
    golds = [[1, 2, 3], [4, 5]]
    half = gold_states(golds)
    syn = synthetic_states(golds, half, [[7, 8], [9]], 10, epoch_rng(0, 0))
    assert syn
    for qi, hist in syn:
        assert n_wrong(hist, golds[qi]) == 1 and missing_gold(hist, golds[qi])


def test_gold_training_writes_a_checkpoint_with_manifest(gold_checkpoint, tiny_loaded):
    out, result = gold_checkpoint
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "tttembed-chain-encoder"
    assert manifest["epochs_done"] == 1 and manifest["config"]["regime"] == "gold"
    assert manifest["config"]["tau"] == 0.05 and manifest["device"].startswith(("cpu", "cuda", "mps"))
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert (out / "optimizer.safetensors").is_file()
    assert not list(out.rglob("*.bin")) and not list(out.rglob("*.pt"))
    task = tiny_loaded[0]
    assert result.history[0]["gold_states"] == len(gold_states(task.golds))
    assert result.history[0]["other_states"] == 0
    assert np.isfinite(result.history[0]["loss"])


def test_fresh_adapter_equals_frozen_and_trained_one_differs(gold_checkpoint, tiny_loaded):
    from tttembed.chain.checkpoint import load_encoder

    _, index, emb = tiny_loaded
    texts = ["Who founded Orchid College?", "Ada Marlow [SEP] Kestrel Bay"]
    frozen = emb.encode(texts, "query")
    fresh = load_encoder(None, max_seq_length=48).encode(texts)
    np.testing.assert_allclose(fresh, frozen, atol=1e-5)
    trained = load_encoder(gold_checkpoint[0], max_seq_length=48, index=index).encode(texts)
    assert np.abs(trained - frozen).max() > 1e-4
    np.testing.assert_allclose(np.linalg.norm(trained, axis=1), 1.0, atol=1e-5)


def test_resume_continues_after_the_last_epoch(gold_checkpoint, tiny_loaded, tmp_path):
    import shutil

    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    out = tmp_path / "gold"
    shutil.copytree(gold_checkpoint[0], out)
    done = train_chain(task, index, frozen_encode(emb), tiny_config(regime="gold"), out)
    assert len(done.history) == 1                      # already finished: nothing to do
    more = train_chain(task, index, frozen_encode(emb), tiny_config(regime="gold", epochs=2), out)
    assert [h["epoch"] for h in more.history] == [1, 2]
    assert json.loads((out / "manifest.json").read_text())["epochs_done"] == 2
    with pytest.raises(ConfigError, match="another configuration"):
        train_chain(task, index, frozen_encode(emb), tiny_config(regime="gold", lr=1e-3), out)


def test_on_policy_uses_reached_states(gold_checkpoint, tiny_loaded, tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    with pytest.raises(ConfigError, match="states-from"):
        train_chain(task, index, frozen_encode(emb), tiny_config(regime="on-policy"), tmp_path / "x")
    result = train_chain(task, index, frozen_encode(emb), tiny_config(regime="on-policy", epochs=2),
                         tmp_path / "op", states_from=gold_checkpoint[0])
    first, second = result.history
    n_gold = len(gold_states(task.golds))
    for h in (first, second):
        assert h["gold_states"] == n_gold
        assert 0 < h["other_states"] <= n_gold and h["reached_pool"] >= h["other_states"]
    manifest = json.loads((tmp_path / "op" / "manifest.json").read_text())
    assert manifest["states_from"] == str(gold_checkpoint[0])


def test_synthetic_and_shared_pool_regimes_run(tiny_loaded, tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    result = train_chain(task, index, frozen_encode(emb),
                         tiny_config(regime="synthetic", shared_negatives=True), tmp_path / "syn")
    assert result.history[0]["other_states"] > 0


def test_bad_config_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown regime"):
        tiny_config(regime="offline").check()
    with pytest.raises(ConfigError):
        tiny_config(epochs=0).check()
