from __future__ import annotations

import numpy as np
import pytest

from tttembed.evaluation import analyses as A
from tttembed.evaluation import protocols as P
from tttembed.ttt.options import LearnOptions

from .synth import QrelsRewards, make_work


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_work(tmp_path_factory.mktemp("synth"))


def test_with_alpha_copies(work):
    rewards = QrelsRewards(work)
    pairs = [(k, d) for k, ds in P.candidates(work, 10).items() for d in ds]
    st = P.learn_state(P.eval_sources(work), rewards(pairs), LearnOptions(scope="task"))
    fixed = A.with_alpha(st, 0.3)
    assert np.allclose(fixed.alpha, 0.3) and not np.allclose(st.alpha, 0.3)
    assert fixed.vectors is st.vectors


def test_alpha_ablation_settings(work):
    res = A.alpha_ablation(work, QrelsRewards(work), ns=(1, 0), alphas=(0.5, 1.0))
    assert {r.method for r in res} == {"alpha=rule", "alpha=0.5", "alpha=1.0"}
    assert {r.setting["n"] for r in res} == {1, "all"}
    held = A.alpha_ablation(work, QrelsRewards(work), ns=(1, 0), alphas=(0.5,),
                            heldout_eval=True)
    assert {r.setting["n"] for r in held} == {1}  # n = all has nothing left to evaluate
    for r in held:
        assert len(r.per_query["ndcg@10"]) == sum(len(td.queries) - 1 for td in work)


def test_breadth_depth_fixed_budget(work):
    rewards = QrelsRewards(work)
    res = A.breadth_depth(work, rewards, bs=(2.0,), depths=(1, 2, 5, 10))
    n = sum(len(td.queries) for td in work)
    assert {r.setting["depth"] for r in res} == {2, 5, 10}  # depth >= b
    for call in rewards.calls:
        assert len(call) == 2 * n
    depths = {len({k for k, _ in c}) for c in rewards.calls}
    assert depths == {n, n * 2 // 5 + (1 if (2 * n) % 5 else 0), n // 5}


def test_objective_comparison_shares_kd_cells(work):
    seen = []

    def cells(parts, compute):
        seen.append(dict(parts))
        return compute()
    res = A.objective_comparison(work, QrelsRewards(work), bs=(1.0,), scopes=("task",),
                                 cells=cells)
    assert [r.setting["objective"] for r in res] == ["kd", "rkl", "grpo"]
    assert {"p": "fixed", "m": "task", "B": 20, "o": "kd"} in seen
