"""The batched optimizer: exactness against autograd + torch Adam, and its properties."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.objectives import RIDGE, TAU_S, TAU_T, make_targets, reference_losses
from tttembed.adapt.optimize import RewardBatch, learn_vectors
from tttembed.core.errors import DataError

torch = pytest.importorskip("torch")


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


def random_batch(n=24, k=6, d=12, g=4, seed=0, nan_frac=0.2) -> RewardBatch:
    rng = np.random.default_rng(seed)
    x = unit(rng.normal(size=(n, d)))
    z = unit(rng.normal(size=(n, k, d)))
    r = rng.uniform(size=(n, k))
    r[rng.uniform(size=(n, k)) < nan_frac] = np.nan
    r[:, 0] = rng.uniform(size=n)
    group = np.arange(n) % g
    weight = rng.uniform(0.2, 1.0, size=n)
    return RewardBatch(x, z, r, group, weight)


def reference_learn(batch: RewardBatch, n_groups: int, objective: str, steps: int):
    """Autograd on the stacked V with torch.optim.Adam: the textbook implementation (float64)."""
    x, z = torch.from_numpy(batch.x).double(), torch.from_numpy(batch.z).double()
    s0 = (torch.einsum("nkd,nd->nk", z, x) / TAU_S).numpy()
    t = make_targets(objective, batch.r, batch.mask, s0, tau_t=TAU_T)
    g = torch.from_numpy(batch.group)
    w = torch.from_numpy(batch.weight)
    v = torch.zeros(n_groups, batch.dim, requires_grad=True, dtype=torch.float64)
    opt = torch.optim.Adam([v], lr=0.01, foreach=False)
    trace = []
    for _ in range(steps):
        opt.zero_grad()
        y = torch.nn.functional.normalize(x + v[g], dim=1)
        loss = (reference_losses(torch.einsum("nkd,nd->nk", z, y) / TAU_S, t) * w).sum()
        loss = loss + RIDGE * (v * v).sum()
        loss.backward()
        trace.append(float(loss.detach()))
        opt.step()
    return v.detach().numpy(), np.array(trace)


@pytest.mark.parametrize("objective", ["kd", "rkl", "grpo"])
@pytest.mark.parametrize("chunk", [None, 5])
def test_matches_autograd_and_torch_adam(objective, chunk):
    batch = random_batch()
    res = learn_vectors(batch, 4, objective, steps=60, chunk_size=chunk)
    ref, trace = reference_learn(batch, 4, objective, 60)
    # float32 against float64: GRPO's clipping makes it the most rounding-sensitive
    np.testing.assert_allclose(res.vectors, ref, atol=4e-5 if objective == "grpo" else 1e-5)
    np.testing.assert_allclose(res.loss_trace, trace, rtol=5e-4 if objective == "grpo" else 1e-5,
                               atol=1e-5)
    assert np.abs(ref).max() > 0.05  # the comparison is not between two zero vectors


def test_groups_are_independent():
    batch = random_batch(n=30, g=3, seed=1)
    joint = learn_vectors(batch, 3, steps=300)
    for gi in range(3):
        rows = batch.group == gi
        alone = RewardBatch(batch.x[rows], batch.z[rows], np.where(batch.mask, batch.r, np.nan)[rows],
                            np.zeros(rows.sum(), dtype=int), batch.weight[rows])
        res = learn_vectors(alone, 1, steps=300)
        np.testing.assert_allclose(joint.vectors[gi], res.vectors[0], atol=1e-5)
        np.testing.assert_allclose(joint.final_loss[gi], res.final_loss[0], rtol=1e-5)


@pytest.mark.parametrize("scope_groups", ["global", "task", "query", "interleaved", "mixed"])
def test_chunking_does_not_change_results(scope_groups):
    n = 23
    group = {"global": np.zeros(n, int), "task": np.repeat(np.arange(3), [5, 9, 9]),
             "query": np.arange(n), "interleaved": np.arange(n) % 4,
             "mixed": np.repeat([5, 0, 1, 6, 2, 3, 4], [2, 1, 3, 1, 12, 2, 2])}[scope_groups]
    base = random_batch(n=n, seed=2)
    batch = RewardBatch(base.x, base.z, np.where(base.mask, base.r, np.nan), group, base.weight)
    ng = int(group.max()) + 1
    ref = learn_vectors(batch, ng, steps=40, chunk_size=n).vectors
    for chunk in (1, 2, 7, 16):
        np.testing.assert_allclose(learn_vectors(batch, ng, steps=40, chunk_size=chunk).vectors,
                                   ref, atol=2e-6)


def test_deterministic():
    batch = random_batch(seed=3)
    a = learn_vectors(batch, 4, steps=50, chunk_size=7).vectors
    b = learn_vectors(batch, 4, steps=50, chunk_size=7).vectors
    assert np.array_equal(a, b)


def test_representable_teacher_is_approached():
    """Rewards r = tau_T * s(v*) + c make the teacher equal pi(v*): KD moves towards v*."""
    rng = np.random.default_rng(4)
    n, k, d = 40, 10, 16
    x = unit(rng.normal(size=(n, d)))
    z = unit(rng.normal(size=(n, k, d)))
    v_star = 0.6 * unit(rng.normal(size=d))
    y_star = unit(x + v_star)
    s_star = np.einsum("nkd,nd->nk", z, y_star) / TAU_S
    r = TAU_T * s_star + 0.5
    assert r.min() >= 0 and r.max() <= 1
    batch = RewardBatch(x, z, r, np.zeros(n, int), np.full(n, 1 / n))
    res = learn_vectors(batch, 1, steps=300)
    kl = res.final_loss[0] - RIDGE * float(res.vectors[0] @ res.vectors[0])
    assert res.loss_trace[0] > 0.3
    assert kl < 0.25 * res.loss_trace[0]
    assert res.loss_trace[-1] < res.loss_trace[0]
    cos = float(res.vectors[0] @ v_star) / np.linalg.norm(res.vectors[0]) / 0.6
    assert cos > 0.9

    def top1_agreement(v):
        s = np.einsum("nkd,nd->nk", z, unit(x + v))
        return np.mean(s.argmax(1) == s_star.argmax(1))

    assert top1_agreement(res.vectors[0]) > top1_agreement(np.zeros(d)) + 0.2


def test_constant_rewards_give_no_correction():
    """Constant rewards: GRPO's advantages vanish; KD with a uniform student stays at zero."""
    rng = np.random.default_rng(5)
    n, k, d = 6, 4, 12
    x = unit(rng.normal(size=(n, d)))
    # candidates symmetric around x: x . z_i is the same for every i
    z = np.empty((n, k, d), dtype=np.float32)
    for q in range(n):
        basis = np.linalg.qr(np.column_stack([x[q], rng.normal(size=(d, k))]))[0][:, 1:]
        z[q] = 0.6 * x[q] + 0.8 * basis.T
    z = unit(z)
    r = np.full((n, k), 0.7)
    for objective in ("kd", "rkl", "grpo"):
        res = learn_vectors(RewardBatch(x, z, r, np.zeros(n, int), np.full(n, 1 / n)), 1,
                            objective)
        assert np.linalg.norm(res.vectors) < 1e-3, objective
    # GRPO with constant rewards on arbitrary candidates: exactly zero
    batch = random_batch(seed=6, nan_frac=0)
    const = RewardBatch(batch.x, batch.z, np.full(batch.r.shape, 0.4), batch.group, batch.weight)
    assert np.linalg.norm(learn_vectors(const, 4, "grpo", steps=50).vectors) < 1e-6


def test_padding_and_nan_rewards_are_dropped():
    rng = np.random.default_rng(7)
    n, k, d = 10, 4, 8
    x = unit(rng.normal(size=(n, d)))
    z = unit(rng.normal(size=(n, k, d)))
    r = rng.uniform(size=(n, k))
    base = learn_vectors(RewardBatch(x, z, r, np.arange(n) % 2, np.ones(n)), 2, steps=50)
    # two extra candidates per query: one padded by the mask, one with a nan reward
    zp = np.concatenate([z, unit(rng.normal(size=(n, 2, d)))], axis=1)
    rp = np.concatenate([r, rng.uniform(size=(n, 1)), np.full((n, 1), np.nan)], axis=1)
    mask = np.ones((n, k + 2), bool)
    mask[:, k] = False
    padded = learn_vectors(RewardBatch(x, zp, rp, np.arange(n) % 2, np.ones(n), mask), 2,
                           steps=50)
    np.testing.assert_allclose(padded.vectors, base.vectors, atol=1e-6)
    ragged = RewardBatch.from_ragged(x, [z[i, : 2 + i % 3] for i in range(n)],
                                     [r[i, : 2 + i % 3] for i in range(n)], np.zeros(n, int),
                                     np.ones(n))
    assert ragged.mask.sum(1).tolist() == [2 + i % 3 for i in range(n)]


def test_result_bookkeeping_and_empty_group():
    batch = random_batch(n=9, g=3, seed=8)
    group = np.array([0, 0, 0, 2, 2, 2, 2, 2, 2])
    b = RewardBatch(batch.x, batch.z, np.where(batch.mask, batch.r, np.nan), group, batch.weight)
    steps: list[int] = []
    res = learn_vectors(b, 4, steps=20, callback=steps.append)
    assert steps == list(range(1, 21))
    assert res.n_g.tolist() == [3, 0, 6, 0]
    np.testing.assert_allclose(res.alpha, [0.75, 0, 6 / 7, 0])
    assert not res.vectors[[1, 3]].any() and res.vectors[[0, 2]].any()
    assert res.final_loss[1] == 0 and res.final_loss[0] > 0
    assert res.vectors.dtype == np.float32 and res.hyperparameters["steps"] == 20
    assert res.hyperparameters["tau_t"] == 0.02 and res.hyperparameters["ridge"] == 0.3


def test_validation_errors():
    rng = np.random.default_rng(9)
    x = unit(rng.normal(size=(3, 4)))
    z = unit(rng.normal(size=(3, 2, 4)))
    ok = {"group": np.zeros(3, int), "weight": np.ones(3)}
    with pytest.raises(DataError, match="no reward"):
        RewardBatch(x, z, np.array([[0.1, 0.2], [np.nan, np.nan], [0.3, 0.1]]), **ok)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        RewardBatch(x, z, np.full((3, 2), 3.0), **ok)
    with pytest.raises(DataError, match="L2-normalised"):
        RewardBatch(2 * x, z, np.full((3, 2), 0.5), **ok)
    with pytest.raises(DataError, match="shapes"):
        RewardBatch(x, z[:, :, :3], np.full((3, 2), 0.5), **ok)
    batch = RewardBatch(x, z, np.full((3, 2), 0.5), group=np.array([0, 1, 2]), weight=np.ones(3))
    with pytest.raises(DataError, match="n_groups"):
        learn_vectors(batch, 2, steps=1)


def test_learning_does_not_import_torch():
    """The optimizer is numpy only: importing and running it never imports torch."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from tttembed.adapt import RewardBatch, learn_vectors\n"
        "x = np.eye(3, dtype=np.float32)[:2]\n"
        "z = np.stack([np.eye(3, dtype=np.float32)] * 2)\n"
        "res = learn_vectors(RewardBatch(x, z, np.array([[1, 0, 0.5], [0, 1, 0.2]]),"
        " np.zeros(2, int), np.ones(2) / 2), 1, steps=5)\n"
        "assert res.vectors.any()\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("objective", ["kd", "rkl", "grpo"])
@pytest.mark.parametrize("layout", ["query", "mixed"])
def test_query_blocks_equal_the_step_major_reference(objective, layout):
    """One-query groups learned block by block give bit-identical vectors to the reference."""
    n = 23
    group = np.arange(n) if layout == "query" else np.repeat([0, 1, 2, 3, 4, 5, 6],
                                                               [1, 1, 6, 1, 1, 12, 1])
    base = random_batch(n=n, k=5, d=16, seed=8)
    batch = RewardBatch(base.x, base.z, np.where(base.mask, base.r, np.nan), group, base.weight)
    ng = int(group.max()) + 1
    seen: list[int] = []
    for chunk in (3, None):
        ref = learn_vectors(batch, ng, objective, steps=40, chunk_size=chunk, block_queries=False)
        for fused, threads in ((False, 1), (True, 3)):
            got = learn_vectors(batch, ng, objective, steps=40, chunk_size=chunk,
                                callback=seen.append, fused=fused, threads=threads)
            assert np.array_equal(got.vectors, ref.vectors)
            assert seen == list(range(1, 41))
            seen.clear()
        np.testing.assert_allclose(got.loss_trace, ref.loss_trace, rtol=1e-12)
        np.testing.assert_allclose(got.final_loss, ref.final_loss, rtol=1e-12)
    assert np.abs(ref.vectors).max() > 0.01


def test_fused_adam_is_bit_identical_to_numpy():
    from tttembed.adapt import kernels
    from tttembed.adapt.optimize import _Adam

    if kernels.adam_kernel() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(9)
    plain, fused = _Adam(7, 33, 0.01), _Adam(7, 33, 0.01, fused=True)
    for _ in range(25):
        grad = rng.normal(scale=rng.choice([1e-9, 1e-3, 1.0]), size=(7, 33)).astype(np.float32)
        plain.next_step()
        fused.next_step()
        assert plain.update(slice(0, 7), grad.copy()) == fused.update(slice(0, 7), grad.copy())
    for a in ("v", "m", "s"):
        assert np.array_equal(getattr(plain, a), getattr(fused, a)), a
