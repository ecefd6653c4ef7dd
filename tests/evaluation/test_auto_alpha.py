"""``alpha`` = rule / number / auto through ``learn_state``, the state file and the eval
harness (methods ``<scope>-auto``, the ``alpha=auto`` ablation row, the harm count)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from tttembed.adapt import RewardBatch, learn_vectors, load_state, make_groups
from tttembed.adapt.crossval import ALPHA_GRID, alpha_values
from tttembed.core.errors import ConfigError
from tttembed.evaluation import analyses as A
from tttembed.evaluation import method_cells as M
from tttembed.evaluation import protocols as P
from tttembed.evaluation.config import CELL_METRICS
from tttembed.evaluation.report import alpha_regret, harm_counts, summarise
from tttembed.ttt import reward_table
from tttembed.ttt.guard import GUARD_VERSION
from tttembed.ttt.options import LearnOptions

from .synth import QrelsRewards, make_work

TASK = LearnOptions(scope="task")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_work(tmp_path_factory.mktemp("synth"), sizes=(30, 24))


def all_pairs(work, depth=10):
    return [(k, d) for k, ds in P.candidates(work, depth).items() for d in ds]


class RawOrderRewards:
    """Rewards that follow the base ranking exactly (1 at rank 1 down to 0.1 at rank 10):
    the raw vectors already order every query's rewarded candidates perfectly, so a
    learned vector can only tie or lose on held-out candidates."""

    def __init__(self, work):
        self.rank = {}
        for td in work:
            for key, dids in td.base.candidates(td.index, td.queries.keys).items():
                self.rank.update({(key, d): i for i, d in enumerate(dids)})

    def __call__(self, pairs):
        out: dict[str, dict[str, float]] = {}
        for key, did in pairs:
            out.setdefault(key, {})[did] = 1.0 - self.rank[(key, did)] / 10
        return out


def test_rule_is_bit_identical_to_learning_without_crossvalidation(work):
    rewards = QrelsRewards(work)(all_pairs(work))
    xs, zs, rs, qids, tasks = [], [], [], [], []
    for td in work:  # the reward table and batch exactly as learn_state built them before
        kept, x, z, r = reward_table(td.queries, td.base, td.index, rewards)
        xs.append(x)
        zs += z
        rs += r
        qids += [td.queries.qids[i] for i in kept]
        tasks += [td.queries.tasks[i] for i in kept]
    groups = make_groups("task", qids, tasks)
    o = groups.order()
    batch = RewardBatch.from_ragged(np.concatenate(xs)[o], [zs[i] for i in o],
                                    [rs[i] for i in o], groups.index[o], groups.weights[o])
    ref = learn_vectors(batch, len(groups.keys))
    for st in (P.learn_state(P.eval_sources(work), rewards, TASK),
               P.learn_state(P.eval_sources(work), rewards, TASK, crossval=True)):
        assert st.vectors.tobytes() == ref.vectors.tobytes()
        assert st.alpha.tobytes() == ref.alpha.tobytes()
        assert st.alpha_asked == st.alpha_chosen == "rule"
    assert P.learn_state(P.eval_sources(work), rewards, TASK).crossval is None


def test_auto_learns_the_same_vectors_and_picks_from_the_grid(work, tmp_path):
    rewards = QrelsRewards(work)(all_pairs(work))
    rule = P.learn_state(P.eval_sources(work), rewards, TASK)
    auto = P.learn_state(P.eval_sources(work), rewards, replace(TASK, alpha="auto", seed=3))
    assert auto.vectors.tobytes() == rule.vectors.tobytes()
    assert auto.alpha_asked == "auto" and auto.alpha_chosen in ALPHA_GRID
    assert auto.crossval is not None and auto.crossval["auto"] == auto.alpha_chosen
    assert np.array_equal(auto.alpha, alpha_values(auto.alpha_chosen, auto.n_g))
    # judgments as rewards: the shared direction of relevant documents helps
    assert auto.alpha_chosen != "0" and 0 < auto.crossval["queries"] <= 54  # equal rewards: out
    again = P.learn_state(P.eval_sources(work), rewards, replace(TASK, alpha="auto", seed=3))
    assert again.crossval == auto.crossval and again.alpha.tobytes() == auto.alpha.tobytes()
    fixed = P.learn_state(P.eval_sources(work), rewards, replace(TASK, alpha=0.3))
    assert np.allclose(fixed.alpha, 0.3) and fixed.alpha_chosen == "0.3"
    with pytest.raises(ConfigError, match="unknown alpha"):
        P.learn_state(P.eval_sources(work), rewards, replace(TASK, alpha="oracle"))
    path = auto.save(tmp_path / "auto.npz")
    back = load_state(path)
    assert (back.alpha_asked, back.alpha_chosen, back.crossval) == (
        "auto", auto.alpha_chosen, auto.crossval)
    assert json.loads(path.with_suffix(".json").read_text())["alpha_chosen"] == auto.alpha_chosen


def test_older_state_files_load_as_the_rule(work, tmp_path):
    st = P.learn_state(P.eval_sources(work), QrelsRewards(work)(all_pairs(work)), TASK)
    path = st.save(tmp_path / "old.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    manifest = json.loads(str(arrays["manifest"][()]))
    for key in ("alpha_asked", "alpha_chosen", "crossval"):
        manifest.pop(key)
    arrays["manifest"] = np.array(json.dumps(manifest))
    np.savez(path, **arrays)
    back = load_state(path)
    assert (back.alpha_asked, back.alpha_chosen, back.crossval) == ("rule", "rule", None)
    assert back.alpha.tobytes() == st.alpha.tobytes()


def test_auto_shrinks_to_raw_when_the_state_can_only_hurt(work):
    rewards = RawOrderRewards(work)
    for scope in ("global", "task", "query"):
        st = P.learn_state(P.eval_sources(work), rewards(all_pairs(work)),
                           LearnOptions(scope=scope, alpha="auto"))
        assert st.alpha_chosen == "0" and not st.alpha.any(), scope
        assert st.crossval["gains"][-1]["gain"] < 0  # the rule loses on held-out pairs
    res = P.fixed_population(work, rewards, budgets=(1.0,), baselines=(),
                             alphas=("rule", "auto"))
    by = {r.method: r.per_query for r in res}
    assert {"task", "task-auto", "global-auto", "query-auto"} <= set(by)
    metrics = {m: by["task-auto"][m] for m in CELL_METRICS}
    assert metrics == by["raw"]  # alpha 0: exactly the raw retrieval
    assert by["task"] != by["raw"]
    assert by["task-auto"][M.ALPHA_CHOSEN] == {"0": 1.0}  # the choice is kept with the cell
    assert M.ALPHA_CHOSEN not in by["task"]
    rows = summarise(res, P.raw_metrics(work), n_resamples=50)["rows"]
    chosen = {r["method"]: r.get("alpha_chosen") for r in rows}
    assert chosen["task-auto"] == chosen["query-auto"] == "0" and chosen["task"] is None
    harm = harm_counts(rows)["task-auto"]
    assert harm["shrunk"] == 1
    # the eval's task-auto is chosen as learn's: the guard paid its validation pairs
    # through the same judge, within a tenth of the cell's pairs, and it is recorded
    validation = by["task-auto"][M.VALIDATION]
    assert 0 <= validation["paid"] <= validation["cap"] and "guard" in validation
    assert harm["learning_pairs"] > 0 and harm["validation_pairs"] == int(validation["paid"])
    assert by["query-auto"][M.VALIDATION]["guard"] == 1.0  # query-wise: its own queries


def test_auto_methods_in_every_protocol_and_their_cell_keys(work):
    seen: list[dict] = []

    def cells(parts, compute):
        seen.append(dict(parts))
        return compute()
    rewards = QrelsRewards(work)
    P.fixed_population(work, rewards, budgets=(1.0,), baselines=(), scopes=("task",),
                       alphas=("rule", "auto"), cells=cells)
    held = P.heldout(work, rewards, alphas=("rule", "auto"), cells=cells)
    loto = P.leave_one_task_out(work, rewards, alphas=("rule", "auto"), cells=cells)
    assert {"global-auto", "task-auto"} <= {r.method for r in held}
    assert {r.method for r in loto} == {"raw", "global", "global-auto"}
    rule_keys = [p for p in seen if p.get("m") in ("task", "global")]
    auto_keys = [p for p in seen if str(p.get("m")).endswith("-auto")]
    assert rule_keys and all("a" not in p for p in rule_keys)  # cached rule cells unchanged
    assert auto_keys and all(p["a"] == "auto" and p["folds"] == 5 for p in auto_keys)
    assert all(p["guard"] == GUARD_VERSION for p in auto_keys)  # guarded cells, new keys
    with pytest.raises(ConfigError, match="unknown alpha method"):
        P.alpha_tag("best")


def test_alpha_ablation_gains_the_auto_row(work):
    res = A.alpha_ablation(work, QrelsRewards(work), ns=(16, 0), alphas=(0.5, 1.0), auto=True)
    assert {r.method for r in res} == {"alpha=rule", "alpha=0.5", "alpha=1.0", "alpha=auto"}
    reg = summarise(res, P.raw_metrics(work), n_resamples=200)["alpha_regret"]
    assert list(reg["regret"]) == ["rule", "0.5", "1.0", "auto"]
    assert all(reg["regret"][a] >= 0 for a in ("rule", "0.5", "1.0"))  # auto is not an oracle


def test_regret_oracle_leaves_auto_out():
    rows = [{"protocol": "alpha", "setting": {"n": 1, "alpha": a},
             "tasks": {"t": {"ndcg@10": v}}} for a, v in (("rule", 0.5), ("0.5", 0.6),
                                                        ("auto", 0.7))]
    reg = alpha_regret(rows)
    assert reg["regret"] == pytest.approx({"rule": 0.1, "0.5": 0.0, "auto": -0.1})


def test_harm_counts():
    def row(method, entries, B=10):
        return {"protocol": "fixed", "method": method, "B": B,
                "tasks": {f"t{i}": {"ndcg@10_": 0, "delta_ndcg@10": d, "p_raw": p}
                          for i, (d, p) in enumerate(entries)}}
    rows = [row("raw", [(0, 1.0)], B=0),
            row("task", [(-0.02, 0.01), (0.03, 0.001), (-0.01, 0.2)]),
            row("task-auto", [(0.0, 1.0), (0.02, 0.01), (-0.001, 0.6)]),
            {**row("task-auto", [(0.0, 1.0)], B=20), "alpha_chosen": "0"},
            {**row("task-auto", [(0.01, 0.5)], B=30), "alpha_chosen": "0.3"}]
    rows[2]["alpha_chosen"] = "0"
    assert harm_counts(rows) == {"task": {"cells": 3, "losses": 1, "gains": 1},
                                 "task-auto": {"cells": 5, "losses": 0, "gains": 1,
                                               "states": 3, "shrunk": 2}}


def test_select_auto_adds_the_method_row_auto_in_both_protocols(work):
    """``eval --select auto``: one ``auto`` row per budget (and in the held-out protocol),
    learned as ``learn --method auto``, its choice per task recorded with the cell and in
    the report rows, its B the learning pairs plus the validation pairs it paid; the cell
    key carries the selection's and the guard's versions."""
    from tttembed.evaluation.config import CHOICE, VALIDATION
    from tttembed.ttt.select import SELECT_VERSION

    seen: list[dict] = []

    def cells(parts, compute):
        seen.append(dict(parts))
        return compute()
    rewards = QrelsRewards(work)
    fixed = P.fixed_population(work, rewards, budgets=(1.0, 5.0), baselines=("direct",),
                               scopes=("task",), selects=("auto",), cells=cells)
    held = P.heldout(work, rewards, selects=("auto",), cells=cells)
    autos = [r for r in fixed + held if r.method == "auto"]
    assert [r.protocol for r in autos] == ["fixed", "fixed", "heldout"]
    tasks = {td.name for td in work}
    for r in autos:
        chosen = dict(k.split("=", 1) for k in r.per_query[CHOICE])
        assert set(chosen) == tasks
        paid = int(r.per_query[VALIDATION]["paid"])
        same_b = next(x for x in fixed + held if x.protocol == r.protocol and x.b == r.b
                      and x.method != "auto" and x.budget)
        assert r.budget == same_b.budget + paid and paid <= r.per_query[VALIDATION]["cap"]
    keys = [p for p in seen if p.get("m") == "auto"]
    assert len(keys) == 3 and all(p["sel"] == SELECT_VERSION and p["guard"] == GUARD_VERSION
                                  for p in keys)
    rows = summarise(fixed, P.raw_metrics(work), n_resamples=50)["rows"]
    auto_rows = [row for row in rows if row["method"] == "auto"]
    assert all(set(row["chosen"]) == tasks for row in auto_rows)
    assert all("vs_direct" in row for row in auto_rows)  # paired with direct at its b


def test_the_guard_column_counts_the_budgets_validated_for_method_auto():
    """Method auto's rows carry a validation record but no alpha: its "guard ran" cell
    reads "2 of 3" (budgets where the judged diff ran, of those validated), not "2 of 0"."""
    from tttembed.evaluation.render import _guard_cells

    def row(B, guard):
        return {"protocol": "fixed", "method": "auto", "B": B,
                "validation": {"paid": 5.0, "cap": 10.0, "guard": guard},
                "tasks": {"t": {"ndcg@10_": 0, "delta_ndcg@10": 0.01, "p_raw": 0.5}}}
    harm = harm_counts([row(10, 0.0), row(100, 1.0), row(1000, 1.0)])["auto"]
    assert harm["validated"] == 3 and harm["guarded"] == 2
    assert _guard_cells(harm)[0] == "2 of 3"
