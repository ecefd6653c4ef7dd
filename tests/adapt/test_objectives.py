"""Objectives: analytic logit gradients against autograd, and the losses against the spec."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.objectives import (
    CLIP_EPS,
    OBJECTIVES,
    check_objective,
    loss_and_grad,
    make_targets,
    reference_losses,
)
from tttembed.core.errors import ConfigError

torch = pytest.importorskip("torch")


def setup(seed=0, c=9, k=7, spread=3.0):
    rng = np.random.default_rng(seed)
    r = rng.uniform(size=(c, k))
    mask = rng.uniform(size=(c, k)) > 0.25
    mask[:, 0] = True
    s0 = (rng.normal(size=(c, k)) * 4).astype(np.float32)
    s = (s0 + rng.normal(size=(c, k)) * spread).astype(np.float32)
    return r, mask, s0, s


def softmax(a):
    e = np.exp(a - a.max())
    return e / e.sum()


def spec_loss(objective, r, s, s0):
    """One query, valid candidates only, written straight from METHOD.md (float64)."""
    p = softmax(r / 0.02)
    pi = softmax(s.astype(np.float64))
    if objective == "kd":
        return float(np.sum(p * np.log(p / pi)))
    if objective == "rkl":
        return float(np.sum(pi * np.log(pi / p)))
    adv = (r - r.mean()) / max(r.std(), 1e-4)
    rho = pi / softmax(s0.astype(np.float64))
    clip = np.clip(rho, 1 - CLIP_EPS, 1 + CLIP_EPS)
    return -float(np.mean(np.minimum(rho * adv, clip * adv)))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_analytic_gradient_matches_autograd(objective):
    r, mask, s0, s = setup()
    t = make_targets(objective, r, mask, s0)
    loss, grad = loss_and_grad(s, t)
    st = torch.from_numpy(s).requires_grad_(True)
    ref = reference_losses(st, t)
    ref.sum().backward()
    np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, st.grad.numpy(), atol=1e-5)
    assert np.abs(grad).max() > 1e-2
    assert not grad[~mask].any()  # padded candidates get no gradient


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_losses_follow_the_spec(objective):
    r, mask, s0, s = setup(seed=1)
    loss, _ = loss_and_grad(s, make_targets(objective, r, mask, s0))
    for q in range(len(r)):
        m = mask[q]
        assert loss[q] == pytest.approx(spec_loss(objective, r[q, m], s[q, m], s0[q, m]),
                                        rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_masked_values_do_not_matter(objective):
    r, mask, s0, s = setup(seed=2)
    rng = np.random.default_rng(0)
    junk = rng.normal(size=r.shape).astype(np.float32) * 50
    r2 = np.where(mask, r, rng.uniform(size=r.shape))
    a = loss_and_grad(s, make_targets(objective, r, mask, s0))
    b = loss_and_grad(np.where(mask, s, junk), make_targets(objective, r2, mask,
                                                            np.where(mask, s0, junk)))
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
    np.testing.assert_allclose(a[1], b[1], atol=1e-7)


def test_kd_gradient_is_student_minus_teacher():
    r, mask, _s0, s = setup(seed=3)
    t = make_targets("kd", r, mask)
    _, grad = loss_and_grad(s, t)
    pi = np.where(mask, np.exp(np.where(mask, s, -np.inf) - s.max(1, keepdims=True)), 0)
    pi /= pi.sum(1, keepdims=True)
    np.testing.assert_allclose(grad, pi - t.p, atol=1e-6)
    np.testing.assert_allclose(t.p.sum(1), 1, rtol=1e-6)
    # teacher temperature 0.02: a reward gap of 0.02 is a factor e
    t2 = make_targets("kd", np.array([[0.5, 0.52]]), np.ones((1, 2), bool))
    assert t2.p[0, 1] / t2.p[0, 0] == pytest.approx(np.e, rel=1e-5)


def test_grpo_at_reference_and_with_constant_rewards():
    r, mask, s0, _ = setup(seed=4)
    t = make_targets("grpo", r, mask, s0)
    loss, grad = loss_and_grad(s0, t)  # v = 0: rho = 1, clipping inactive
    np.testing.assert_allclose(loss, 0, atol=1e-6)  # advantages sum to zero
    np.testing.assert_allclose(grad, -t.adv * t.inv_k[:, None], atol=1e-6)
    np.testing.assert_allclose(t.adv.sum(1), 0, atol=1e-5)
    flat = make_targets("grpo", np.full(r.shape, 0.3), mask, s0)
    assert not flat.adv.any()  # std floored at 1e-4, deviations are 0


def test_grpo_clipping_stops_the_gradient():
    # one query, two candidates, the better one already far above the reference
    r = np.array([[1.0, 0.0]])
    s0 = np.zeros((1, 2), np.float32)
    t = make_targets("grpo", r, np.ones((1, 2), bool), s0)
    _, grad_in = loss_and_grad(np.array([[0.1, 0.0]], np.float32), t)
    _, grad_out = loss_and_grad(np.array([[3.0, 0.0]], np.float32), t)
    assert np.abs(grad_in).max() > 0.1
    assert np.abs(grad_out).max() < 1e-6  # rho_1 > 1.2 with A > 0 and rho_2 < 0.8 with A < 0


def test_unknown_objective_lists_the_choices():
    with pytest.raises(ConfigError, match="kd, rkl, grpo"):
        check_objective("ppo")
    with pytest.raises(ValueError, match="s0"):
        make_targets("grpo", np.ones((1, 2)), np.ones((1, 2), bool))
