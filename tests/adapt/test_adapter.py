"""The adapter scope: a low-rank query-side map started at the task-wise state.

- with no step the adapter *is* the task-wise state (its map ``U V^T`` is 0);
- a constructed task where the relevant document is each query rotated by 90 degrees in
  a plane: no single translation can follow a rotation of queries spread around the
  circle, a rank-2 map can; the adapter finds it, the task vector does not;
- its maps survive a save / load and are applied by ``apply_state``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt import AdaptState, RewardBatch, apply_state, learn_vectors, load_state
from tttembed.adapt.adapter import learn_adapters, map_deltas
from tttembed.adapt.parts import StateParts
from tttembed.adapt.scopes import alpha_from_counts
from tttembed.core.errors import DataError

D = 8


def _rotation_task(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries spread around the circle of (e0, e1) (plus a little noise in e2..); the
    relevant candidate is the query turned by +90 degrees, the others by -90, 180 and 0
    degrees (the query itself, ranked first by the raw vector)."""
    rng = np.random.default_rng(seed)
    phi = rng.uniform(0, 2 * np.pi, n)
    x = np.zeros((n, D))
    x[:, 0], x[:, 1] = np.cos(phi), np.sin(phi)
    x[:, 2:] = rng.normal(size=(n, D - 2)) * 0.05
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = np.zeros((n, 4, D))
    for j, turn in enumerate((np.pi / 2, -np.pi / 2, np.pi, 0.0)):
        z[:, j, 0] = np.cos(phi + turn)
        z[:, j, 1] = np.sin(phi + turn)
        z[:, j, 2:] = x[:, 2:] + rng.normal(size=(n, D - 2)) * 0.05
    z /= np.linalg.norm(z, axis=2, keepdims=True)
    r = np.zeros((n, 4))
    r[:, 0] = 1.0
    return x.astype(np.float32), z.astype(np.float32), r


def _batch(x, z, r) -> RewardBatch:
    n = len(x)
    return RewardBatch(x, z, r, np.zeros(n, np.int64), np.full(n, 1.0 / n))


def _states(batch: RewardBatch, steps: int, rank: int = 8) -> tuple[AdaptState, AdaptState]:
    res = learn_vectors(batch, 1)
    ad = learn_adapters(batch, 1, res.vectors, rank=rank, steps=steps)
    alpha = alpha_from_counts(res.n_g)
    common = dict(identity="test", dim=D)
    task = AdaptState("task", ("t",), res.vectors, alpha, res.n_g, **common)
    adapter = AdaptState("adapter", ("t",), ad.vectors, alpha, res.n_g, parts=ad.parts(),
                         **common)
    return task, adapter


def _top1(x, z, state: AdaptState) -> float:
    """Share of queries whose relevant candidate (column 0) ranks first."""
    q = apply_state(x, ["t"] * len(x), state)
    return float((np.einsum("nkd,nd->nk", z, q).argmax(1) == 0).mean())


def test_an_adapter_starts_at_the_task_wise_state():
    batch = _batch(*_rotation_task(40, 0))
    task, start = _states(batch, steps=0)
    assert np.allclose(start.vectors, task.vectors)
    assert np.abs(start.parts.u[0] @ start.parts.v[0].T).max() == 0.0  # U V^T = 0
    assert np.abs(start.parts.u).max() > 0  # U random, V zero: gradients reach V
    x = _rotation_task(10, 1)[0]
    np.testing.assert_allclose(apply_state(x, ["t"] * 10, start),
                               apply_state(x, ["t"] * 10, task), atol=1e-7)
    _, learned = _states(batch, steps=300)
    assert np.abs(apply_state(x, ["t"] * 10, learned)
                  - apply_state(x, ["t"] * 10, task)).max() > 1e-3


def test_a_rotation_the_adapter_finds_and_a_translation_cannot():
    x, z, r = _rotation_task(60, 0)
    task, adapter = _states(_batch(x, z, r), steps=300)
    hx, hz, _ = _rotation_task(200, 7)  # unseen queries of the same task
    raw = AdaptState("task", ("t",), np.zeros((1, D)), np.zeros(1), np.ones(1, np.int64),
                     identity="test", dim=D)
    assert _top1(hx, hz, raw) == 0.0  # the query itself ranks first
    assert _top1(hx, hz, task) < 0.5
    assert _top1(hx, hz, adapter) > 0.9


def test_adapter_maps_are_saved_loaded_and_applied(tmp_path):
    task, adapter = _states(_batch(*_rotation_task(30, 0)), steps=50, rank=3)
    path = adapter.save(tmp_path / "a.npz")
    back = load_state(path)
    assert back.scope == "adapter" and back.parts.rank == 3
    np.testing.assert_array_equal(back.parts.u, adapter.parts.u)
    np.testing.assert_array_equal(back.parts.v, adapter.parts.v)
    x = _rotation_task(5, 3)[0]
    np.testing.assert_allclose(apply_state(x, ["t"] * 5, back),
                               apply_state(x, ["t"] * 5, adapter), atol=1e-7)
    assert not task.parts.arrays()  # additive states write no extra member
    with np.load(path) as data:
        assert {"U", "V", "adapter_rows"} <= set(data.files)


def test_map_deltas_apply_each_rows_own_map():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(2, D, 2)), rng.normal(size=(2, D, 2))
    parts = StateParts(np.array([0, 2]), u, v).checked(3, D)
    x = rng.normal(size=(3, D)).astype(np.float32)
    got = map_deltas(x, parts, np.array([2, 1, 0]))
    np.testing.assert_allclose(got[0], u[1] @ (v[1].T @ x[0]), rtol=1e-4)
    assert not got[1].any()
    np.testing.assert_allclose(got[2], u[0] @ (v[0].T @ x[2]), rtol=1e-4)


def test_malformed_maps_are_refused():
    with pytest.raises(DataError, match="adapter maps disagree"):
        AdaptState("adapter", ("t",), np.zeros((1, D)), np.zeros(1), np.ones(1, np.int64),
                   identity="test", dim=D,
                   parts=StateParts(np.array([0]), np.zeros((1, D, 2)), np.zeros((1, D, 3))))


@pytest.mark.parametrize("objective", ["kd", "rkl", "grpo"])
def test_adapter_gradients_match_finite_differences(objective):
    from tttembed.adapt.adapter import _Rows

    x, z, r = _rotation_task(6, 2)
    r = np.random.default_rng(3).uniform(size=r.shape)
    batch = _batch(x, z, r)
    rows = _Rows(batch, np.arange(6), objective)
    rng = np.random.default_rng(4)
    params = [rng.normal(size=D) * 0.1, rng.normal(size=(D, 2)) * 0.3,
              rng.normal(size=(D, 2)) * 0.3]
    params = [p.astype(np.float64) for p in params]
    rows.x, rows.z = rows.x.astype(np.float64), rows.z.astype(np.float64)
    _, *grads = rows.loss_grad(*params)
    eps = 1e-6
    for p, g in zip(params, grads):
        for idx in [(0,), (3,)] if p.ndim == 1 else [(0, 0), (5, 1)]:
            old = p[idx]
            p[idx] = old + eps
            up = rows.loss_grad(*params)[0]
            p[idx] = old - eps
            down = rows.loss_grad(*params)[0]
            p[idx] = old
            assert g[idx] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7)


def test_state_show_and_states_diff_see_the_maps(tmp_path):
    from tttembed.cli.inspect import state_lines, state_summary
    from tttembed.registry.versions import Registry

    task, a = _states(_batch(*_rotation_task(30, 0)), steps=30, rank=3)
    lines = dict(state_lines(state_summary(load_state(a.save(tmp_path / "a.npz")))))
    assert "rank 3" in lines["adapter"] and "adapter" not in dict(state_lines(
        state_summary(load_state(task.save(tmp_path / "t.npz")))))
    u = a.parts.u.copy()
    u[0, 0, 0] += 0.5  # the same vector, another map
    b = AdaptState("adapter", a.keys, a.vectors, a.alpha, a.n_g, identity="test", dim=D,
                   parts=StateParts(a.parts.adapter_rows, u, a.parts.v))
    reg = Registry(tmp_path / "r", create=True)
    va, vb, vc = reg.register(a), reg.register(b), reg.register(a)
    assert reg.diff(va.name, vb.name)["changed"] == ["t"]
    assert reg.diff(va.name, vc.name)["changed"] == []
