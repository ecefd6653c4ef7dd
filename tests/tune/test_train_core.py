"""The trainer's pure parts: the seeded batches and the loss."""

from __future__ import annotations

import math

import numpy as np

from tttembed.tune.train import FULL, QUERY_LORA, batches, mnrl


def test_batches_cover_every_row_once_per_epoch_and_depend_on_seed_and_epoch():
    one = batches(10, 4, seed=0, epoch=0)
    assert [len(b) for b in one] == [4, 4, 2]
    assert sorted(np.concatenate(one).tolist()) == list(range(10))
    assert [b.tolist() for b in batches(10, 4, 0, 0)] == [b.tolist() for b in one]
    assert [b.tolist() for b in batches(10, 4, 0, 1)] != [b.tolist() for b in one]
    assert [b.tolist() for b in batches(10, 4, 1, 0)] != [b.tolist() for b in one]


def test_the_loss_is_cross_entropy_at_the_own_positive():
    import torch

    q = torch.eye(2)
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    # row 0: positive (1) against 0, 0, 1 ; scale 1
    want = -math.log(math.e / (math.e + 1 + 1 + math.e))
    assert abs(float(mnrl(q, docs, 1.0)) - want) < 1e-6


def test_the_recorded_settings_name_what_each_mode_uses():
    assert "lora" in QUERY_LORA.record() and QUERY_LORA.record()["lr"] == 2e-4
    assert "lora" not in FULL.record() and FULL.record()["lr"] == 2e-5
