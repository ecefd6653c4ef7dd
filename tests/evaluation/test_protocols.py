from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.allocate import budget_grid
from tttembed.core.errors import ConfigError
from tttembed.evaluation import protocols as P
from tttembed.evaluation.report import macro
from tttembed.evaluation.workload import EVAL_DEPTH, TaskData
from tttembed.ttt.options import LearnOptions

from .synth import QrelsRewards, make_work


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_work(tmp_path_factory.mktemp("synth"))


def test_fixed_population_same_pairs_for_every_method(work):
    rewards = QrelsRewards(work)
    budgets = (0.5, 1.0, 10.0)
    res = P.fixed_population(work, rewards, budgets=budgets)
    n = sum(len(td.queries) for td in work)
    grid = budget_grid(n, budgets)
    # rewards asked once, for the largest nested prefix; every method derives from it
    assert len(rewards.calls) == 1 and len(rewards.calls[0]) == grid[-1]
    methods = [r.method for r in res]
    assert methods[:3] == ["raw", "prf-avg", "prf-rocchio"]
    assert len(res) == 3 + len(grid) * 5
    for B in grid:
        at = [r for r in res if r.budget == B]
        assert {r.method for r in at} == {"direct", "rw-rocchio", "global", "task", "query"}
        assert all(r.b == pytest.approx(B / n) for r in at)
    keys = {k for td in work for k in td.queries.keys}
    assert all(set(r.per_query["ndcg@10"]) == keys for r in res)


def test_perfect_rewards_help_and_direct_rerank_fixes_top10(work):
    res = P.fixed_population(work, QrelsRewards(work), budgets=(10.0,),
                             baselines=("direct",))
    raw = next(r for r in res if r.method == "raw").per_query["ndcg@10"]
    direct = next(r for r in res if r.method == "direct").per_query["ndcg@10"]
    query = next(r for r in res if r.method == "query").per_query["ndcg@10"]
    # direct reranking with perfect rewards on the full top 10 can only help each query
    assert all(direct[k] >= raw[k] - 1e-12 for k in raw)
    assert macro(direct) > macro(raw)
    assert macro(query) > macro(raw)


def test_heldout_split_is_a_seeded_partition(work):
    s, u = P.heldout_split(work, 0.8)
    keys = {k for td in work for k in td.queries.keys}
    assert s | u == keys and not s & u
    for td in work:
        n_s = sum(1 for k in td.queries.keys if k in s)
        assert n_s == int(np.ceil(0.8 * len(td.queries)))
    assert P.heldout_split(work, 0.8) == (s, u)
    with pytest.raises(ConfigError):
        P.heldout_split(work, 1.0)


def test_heldout_learns_on_s_and_evaluates_u_only(work):
    rewards = QrelsRewards(work)
    res = P.heldout(work, rewards, fraction=0.75)
    s, u = P.heldout_split(work, 0.75)
    assert len(rewards.calls) == 1
    assert {k for k, _ in rewards.calls[0]} == s
    assert all(len([d for k, d in rewards.calls[0] if k == q]) == 10 for q in s)
    for r in res:
        assert set(r.per_query["ndcg@10"]) == u
    assert {r.method for r in res} == {"raw", "prf-avg", "prf-rocchio", "global", "task"}


def test_loto_states_never_see_the_held_out_task(work):
    res = P.leave_one_task_out(work, QrelsRewards(work))
    assert [r.method for r in res] == ["raw", "global"] * len(work)
    for td, glob in zip(work, res[1::2]):
        assert glob.setting["held_out"] == td.name
        assert set(glob.per_query["ndcg@10"]) == set(td.queries.keys)
        others = sum(len(o.queries) for o in work if o is not td)
        assert glob.budget == 10 * others
    with pytest.raises(ConfigError):
        P.leave_one_task_out(work[:1], QrelsRewards(work))


def test_learn_state_across_indexes(work):
    rewards = QrelsRewards(work)
    pairs = [(k, d) for k, ds in P.candidates(work, 10).items() for d in ds]
    rw = rewards(pairs)
    glob = P.learn_state(P.eval_sources(work), rw, LearnOptions(scope="global"))
    task = P.learn_state(P.eval_sources(work), rw, LearnOptions(scope="task"))
    assert glob.keys == ("*",) and int(glob.n_g[0]) == sum(len(td.queries) for td in work)
    assert task.keys == tuple(td.name for td in work)
    assert task.n_g.tolist() == [len(td.queries) for td in work]
    assert np.allclose(task.alpha, task.n_g / (task.n_g + 1))
    assert P.learn_state(P.eval_sources(work), {}, LearnOptions(scope="task")) is None


def test_direct_rerank_without_rewards_equals_raw_even_with_ties(tmp_path):
    from tttembed.index.store import load_index, write_index

    from .synth import make_task

    td = make_task(tmp_path, "dup", seed=3)
    vecs = np.asarray(td.index.vectors).copy()
    ids = list(td.index.doc_ids)
    # every document gets a twin with the same vector (exact score ties): FAISS lists the
    # pair in row order, trec_eval by id; direct reranking must follow the evaluation order
    twins = [f"a-{d}" for d in ids]  # twins sort below their originals by id
    path = write_index(tmp_path / "dup2", ids + twins, np.concatenate([vecs, vecs]),
                       embedder_identity="synthetic", embedder_spec="synthetic",
                       corpus_fingerprint="0" * 64)
    index = load_index(path)
    scores, rows = index.search(td.base.x, EVAL_DEPTH)
    from tttembed.ttt.queries import BaseRetrieval

    qrels = {q: {f"a-{d}" if i % 2 else d: g for i, (d, g) in enumerate(docs.items())}
             for q, docs in td.qrels.items()}
    tied = TaskData("dup", index, td.corpus, td.queries, qrels,
                      BaseRetrieval(td.base.x, rows.astype(np.int64), scores))
    raw = P.raw_metrics([tied])
    assert P.direct_metrics([tied], {}) == raw
    one = {"dup/q0": {index.doc_ids[int(rows[0, 0])]: 0.0, index.doc_ids[int(rows[0, 1])]: 1.0}}
    got = P.direct_metrics([tied], one)
    assert {k: v for k, v in got["ndcg@10"].items() if k != "dup/q0"} == \
        {k: v for k, v in raw["ndcg@10"].items() if k != "dup/q0"}


def test_heldout_with_train_queries_evaluates_every_test_query(work):
    from dataclasses import replace

    from tttembed.ttt.queries import BaseRetrieval, QuerySet

    t0 = work[0]
    k = 5
    train = QuerySet((t0.name,) * k, tuple(f"tr{i}" for i in range(k)), ("x",) * k)
    train_base = BaseRetrieval(t0.base.x[:k], t0.base.rows[:k], t0.base.scores[:k])
    with_train = [replace(t0, train=train, train_base=train_base), *work[1:]]
    rewards = QrelsRewards(work)
    res = P.heldout(with_train, rewards, use_train=True)
    asked = {key for key, _ in rewards.calls[0]}
    _, u = P.heldout_split(work, 0.8)
    assert asked == {f"{t0.name}/tr{i}" for i in range(k)} | \
        {key for key in work[1].queries.keys if key not in u}
    evaluated = set(res[-1].per_query["ndcg@10"])
    assert evaluated == set(t0.queries.keys) | {key for key in work[1].queries.keys if key in u}


def test_active_rows_repeat_every_ttt_method_at_the_same_budgets(work):
    rewards = QrelsRewards(work)
    budgets = (1.0, 10.0)
    info: dict = {}
    res = P.fixed_population(work, rewards, budgets=budgets, baselines=(), info=info,
                             allocations=("waterfill", "active"))
    n = sum(len(td.queries) for td in work)
    grid = budget_grid(n, budgets)
    for B in grid:
        water = {r.method for r in res if r.budget == B and "@" not in r.method}
        active = {r.method for r in res if r.budget == B and r.method.endswith("@active")}
        assert active == {f"{m}@active" for m in water} == {
            "global@active", "task@active", "query@active"}
    spent = info["active_allocation"]["budgets"]
    assert [s["B"] for s in spent] == grid
    assert all(s["top"] + s["deeper"] + s["outside"] == s["B"] for s in spent)
    assert len(rewards.calls) > 2  # water-filling asks once; the active rounds ask again
    again = P.fixed_population(work, QrelsRewards(work), budgets=budgets, baselines=(),
                               allocations=("waterfill", "active"))
    for a, b in zip(res, again):  # deterministic
        assert a.method == b.method and a.per_query == b.per_query
