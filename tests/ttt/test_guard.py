"""The guard (judged-diff validation): tasks built so that the answer is known.

Exact vectors (a table embedder, a FAISS index of chosen unit vectors) and a qrels judge:
- *helpful*: one relevant document per query sits at rank 1 (the rewarded candidates
  cannot show a gain), three more lie beyond the top 10 along a shared direction that
  the task-wise vector learns: a re-search brings them in (raw 0.39 -> 1.00);
- *harmful*: the rewarded candidates say "move away from the distractors", but that
  direction floods the top 10 with unjudged irrelevant documents (raw 0.51 -> 0.00 with
  the rule), which only a re-search sees.
"""

from __future__ import annotations

import numpy as np
import pytest

import tttembed.api as tt
from tttembed.adapt.validate import judged_deltas, sign_flip_p
from tttembed.data.beir import corpus_fingerprint
from tttembed.embed.base import l2_normalize
from tttembed.index.store import write_index
from tttembed.score.qrels import QrelsScorer

D, NQ = 16, 40


class TableEmbedder:
    spec = identity = "test:table"
    options: dict = {}
    dim = D

    def __init__(self, table):
        self.table = table

    def encode(self, texts, kind="document", progress=None):
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def documents():
    """Empty ``ids, vecs, docs, qrels`` and ``add(q, name, vector, relevant)`` filling them
    (a unit document vector, its text its name, judged relevant to ``q`` or not)."""
    ids, vecs, docs, qrels = [], [], {}, {}

    def add(q, name, v, relevant):
        ids.append(name)
        vecs.append(l2_normalize(v[None])[0])
        docs[name] = {"title": "", "text": name}
        if relevant:
            qrels.setdefault(q, {})[name] = 1

    return ids, vecs, docs, qrels, add


def _task(tmp_path, kind: str):
    rng = np.random.default_rng(0 if kind == "helpful" else 1)
    e0, e1 = np.eye(D)[0], np.eye(D)[1]
    table, queries = {}, {}
    ids, vecs, docs, qrels, add = documents()

    for i in range(NQ):
        q = f"q{i}"
        n = np.zeros(D)
        n[3:] = rng.normal(size=D - 3) * 0.3
        queries[q], qrels[q] = f"question {i}", {}
        table[f"question {i}"] = l2_normalize((e0 + n)[None])[0]
        if kind == "helpful":
            add(q, f"r{i}_0", e0 + n + 0.4 * e1, True)
            for j in range(1, 4):
                add(q, f"r{i}_{j}", e0 + n + 1.2 * e1 + rng.normal(size=D) * 0.05, True)
            for j in range(12):
                m = np.zeros(D)
                m[3:] = rng.normal(size=D - 3) * 0.25
                add(q, f"x{i}_{j}", e0 + n + m - 0.1 * e1, False)
        else:
            dq = np.zeros(D)
            dq[3:] = rng.normal(size=D - 3)
            add(q, f"r{i}", e0 + n + 0.3 * dq / np.linalg.norm(dq), True)
            for j in range(19):
                m = np.zeros(D)
                m[3:] = rng.normal(size=D - 3) * 0.05
                add(q, f"x{i}_{j}", e0 + n + (0.25 if j < 9 else -0.4) * e1 + m, False)
    table.update(zip(ids, vecs))
    write_index(tmp_path / "idx", ids, np.array(vecs, np.float32), embedder_identity="test:table",
                embedder_spec="test:table", corpus_fingerprint=corpus_fingerprint(docs))
    return tt.open_index(tmp_path / "idx"), TableEmbedder(table), docs, queries, qrels


def _ndcg(index, emb, queries, qrels, states=()):
    run = tt.search(index, queries, task="t", embedder=emb, states=list(states)).to_run()
    return tt.run_metrics(qrels, run)["ndcg@10"]


def _learn(index, emb, docs, queries, qrels, scorer=None, **kw):
    return tt.learn(index, queries, scorer=scorer or QrelsScorer("labels", qrels=qrels),
                    scope="task", task="t", embedder=emb, corpus=docs, **kw)


def test_a_helpful_state_the_old_estimate_shrank_is_kept(tmp_path):
    """b = 3: the judged-candidates estimate sees no gain (the relevant candidate is
    already first) and would keep raw; the guard re-searches, pays the new documents and
    keeps the large gain."""
    index, emb, docs, queries, qrels = _task(tmp_path, "helpful")
    raw = _ndcg(index, emb, queries, qrels)
    rule = _learn(index, emb, docs, queries, qrels, budget=3)
    assert _ndcg(index, emb, queries, qrels, [rule]) > raw + 0.5
    old = rule.crossval
    assert old is not None and old.get("method") is None and old["auto"] == "0"
    auto = _learn(index, emb, docs, queries, qrels, budget=3, alpha="auto",
                  validate_budget=3, seed=0)
    cv = auto.crossval
    assert cv["method"] == "judged-diff" and auto.alpha_chosen != "0"
    assert 0 < cv["validation_pairs_paid"] <= cv["validation_cap"]
    assert auto.pairs["validation"] == cv["validation_pairs_paid"]
    assert _ndcg(index, emb, queries, qrels, [auto]) > raw + 0.5


def test_a_harmful_state_is_shrunk_to_raw(tmp_path):
    """The rule destroys the ranking and the judged-candidates estimate says every alpha
    gains; the guard measures every alpha as a significant loss and keeps raw."""
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    raw = _ndcg(index, emb, queries, qrels)
    rule = _learn(index, emb, docs, queries, qrels, budget=10)
    assert _ndcg(index, emb, queries, qrels, [rule]) < raw - 0.3
    assert all(g["ci"][0] > 0 for g in rule.crossval["gains"] if g["alpha"] != "0")
    auto = _learn(index, emb, docs, queries, qrels, budget=10, alpha="auto",
                  validate_budget=10)
    assert auto.crossval["method"] == "judged-diff" and auto.alpha_chosen == "0"
    assert all(g["ci"][1] < 0 for g in auto.crossval["gains"] if g["alpha"] != "0")
    assert _ndcg(index, emb, queries, qrels, [auto]) == pytest.approx(raw)


@pytest.mark.parametrize("kind", ["helpful", "harmful"])
def test_past_the_cap_a_random_sample_is_paid_and_the_rest_counts_its_mean(tmp_path, kind):
    """A cap below what the validation needs: a random sample of the never-judged
    documents is paid (exactly the cap), the others count the sample's mean reward, and
    the guard still keeps the helpful gain and refuses the harmful state."""
    index, emb, docs, queries, qrels = _task(tmp_path, kind)
    raw = _ndcg(index, emb, queries, qrels)
    budget = 3 if kind == "helpful" else 10
    auto = _learn(index, emb, docs, queries, qrels, budget=budget, alpha="auto",
                  validate_budget=1.5)
    cv = auto.crossval
    assert cv["method"] == "judged-diff" and "random sample" in cv["note"]
    assert cv["validation_pairs_paid"] == cv["validation_cap"] == 60
    assert cv["validation_pairs_needed"] > cv["validation_cap"]
    after = _ndcg(index, emb, queries, qrels, [auto])
    if kind == "helpful":
        assert auto.alpha_chosen != "0" and after > raw + 0.3
    else:
        assert auto.alpha_chosen == "0" and after == pytest.approx(raw)


def test_with_no_validation_budget_unjudged_documents_count_against_the_change(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    auto = _learn(index, emb, docs, queries, qrels, budget=10, alpha="auto",
                  validate_budget=0)
    assert auto.pairs["validation"] == 0 and auto.alpha_chosen == "0"
    assert all(g["ci"][1] < 0 for g in auto.crossval["gains"] if g["alpha"] != "0")


def test_judged_deltas_share_one_ideal_dcg():
    judged = {"a": 1.0, "b": 0.5, "c": 0.0}
    raw, delta = judged_deltas(["c", "b"], [["c", "b"], ["a", "b"], ["x", "y"]], judged, 2)
    ideal = 1.0 + 0.5 / np.log2(3)
    assert raw == pytest.approx((0.5 / np.log2(3)) / ideal)
    assert delta[0] == 0.0 and delta[1] == pytest.approx(1.0 - raw)
    assert delta[2] == pytest.approx(-raw)  # unjudged documents gain nothing


def test_sign_flip_p_is_small_for_a_consistent_gain_and_large_for_noise():
    rng = np.random.default_rng(0)
    tasks = np.array(["t"] * 30)
    assert sign_flip_p(np.full(30, 0.1), tasks, 2000, rng) < 0.01
    assert sign_flip_p(rng.normal(size=30) * 0.1, tasks, 2000, rng) > 0.05


def _gains(**means):
    """Per-alpha evidence with a tight interval around each mean."""
    return {a: {"gain": m, "ci_low": m - 0.01, "ci_high": m + 0.01, "queries": 20}
            for a, m in means.items()}


def test_alpha_auto_on_several_tasks_is_chosen_per_task():
    """A task whose held-out queries lose at every alpha keeps raw (0) although the pooled
    evidence, carried by a task that gains, would have given it the pooled alpha."""
    from tttembed.ttt.distil import task_alphas

    evidence = {"gains": _gains(**{"0": 0.0, "0.1": 0.1, "0.5": 0.3, "rule": 0.2}),
                "loses": _gains(**{"0": 0.0, "0.1": -0.02, "0.5": -0.1, "rule": -0.2}),
                "flat": {**_gains(**{"0": 0.0}), "0.5": {"gain": 0.05, "ci_low": -0.01,
                                                          "ci_high": 0.1, "queries": 20}}}
    assert task_alphas(evidence, ["gains", "loses", "flat"]) == {
        "gains": "0.5", "loses": "0", "flat": "0"}
    assert task_alphas(evidence, ["gains"]) == {}  # one task: the pooled choice is its own
    assert task_alphas(evidence, ["gains", "absent"]) == {}  # no evidence: pooled
