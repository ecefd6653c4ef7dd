"""The one home of judged validation (:mod:`tttembed.ttt.judged`): top-k lists per source,
the never-judged pairs, the two cap policies, and the judged difference."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.ttt.judged import (
    exact_gain,
    judge_lists,
    never_judged,
    sample_by_task,
    sample_pairs,
    source_lists,
    task_shares,
    top_lists,
    whole_queries,
)


class ArrayIndex:
    """Exact inner-product search over a few vectors (the Index role's search)."""

    def __init__(self, ids: list[str], vectors: np.ndarray) -> None:
        self.doc_ids, self.vectors = ids, vectors.astype(np.float32)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        s = q @ self.vectors.T
        rows = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, rows, 1), rows


def test_source_lists_search_each_row_in_its_own_sources_index():
    rng = np.random.default_rng(0)
    a = ArrayIndex([f"a{i}" for i in range(30)], rng.normal(size=(30, 8)))
    b = ArrayIndex([f"b{i}" for i in range(20)], rng.normal(size=(20, 8)))
    owner = [0, 1, 1, 0, 1]
    vecs = {"raw": rng.normal(size=(5, 8)), "adapted": rng.normal(size=(5, 8))}
    got = source_lists([(None, None, a), (None, None, b)], owner, vecs, k=4)
    for row, s in enumerate(owner):
        index = (a, b)[s]
        for name, v in vecs.items():
            assert got[row][name] == top_lists(index, v[row:row + 1], 4)[0]
            assert all(d.startswith("ab"[s]) for d in got[row][name])


class RecordingIndex(ArrayIndex):
    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.asked = q.copy()
        return super().search(q, k)


@pytest.mark.parametrize("by_row", [False, True])
def test_source_lists_stack_in_the_order_the_studies_searched(by_row):
    """FAISS's scores can move in the last bit with a vector's place in the batch, so the
    order of the stacked search is part of the published numbers: list by list (method
    auto's query part) or row by row (the guard)."""
    rng = np.random.default_rng(1)
    index = RecordingIndex([f"d{i}" for i in range(10)], rng.normal(size=(10, 4)))
    vecs = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=(3, 4))}
    got = source_lists([(None, None, index)], [0, 0, 0], vecs, k=3, by_row=by_row)
    want = (np.stack([vecs["a"], vecs["b"]], axis=1).reshape(6, 4) if by_row
            else np.concatenate([vecs["a"], vecs["b"]]))
    np.testing.assert_array_equal(index.asked, want.astype(np.float32))
    for row in range(3):
        for name, v in vecs.items():
            assert got[row][name] == top_lists(index, v[row:row + 1], 3)[0]


def test_never_judged_lists_each_new_document_once_in_order_of_first_appearance():
    lists = [{"raw": ["d1", "d2", "d3"], "new": ["d4", "d2", "d5"]},
             {"raw": ["e1"], "new": ["e1"]}]
    judged = {"t/q1": {"d2": 1.0}, "t/q2": {"e1": 0.0}}
    assert never_judged(["t/q1", "t/q2"], lists, judged) == {"t/q1": ["d1", "d3", "d4", "d5"]}


def test_sample_pairs_pays_all_within_the_cap_and_a_seeded_uniform_sample_past_it():
    pairs = [("q", f"d{i}") for i in range(20)]
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert sample_pairs(pairs, 20, rng) == pairs and rng.bit_generator.state == before
    picked = sample_pairs(pairs, 7, np.random.default_rng(3))
    assert len(picked) == 7 and picked == sorted(picked, key=pairs.index)
    assert picked == sample_pairs(pairs, 7, np.random.default_rng(3))
    assert sample_pairs(pairs, 0, rng) == [] and rng.bit_generator.state == before
    # drawn within the cap too: all of them, and the generator moved
    assert sample_pairs(pairs, 30, rng, draw_within_cap=True) == pairs
    assert rng.bit_generator.state != before


def test_whole_queries_keep_queries_whose_need_fits_and_never_pass_the_cap():
    need = {"a": ["1", "2", "3"], "b": ["1"], "c": ["1", "2"], "d": []}
    for seed in range(10):
        kept = whole_queries(["a", "b", "c", "d"], need, 3, np.random.default_rng(seed))
        assert "d" in kept and sum(len(need[k]) for k in kept) <= 3
        left = {"a", "b", "c"} - set(kept)
        spent = sum(len(need[k]) for k in kept)
        assert all(spent + len(need[k]) > 3 for k in left) or not left


def test_fully_paid_lists_give_the_exact_judged_difference():
    """Every never-judged document paid: the sampled decomposition is the exact Delta,
    so the two estimators agree on the mean."""
    rng = np.random.default_rng(1)
    keys = [f"t/q{i}" for i in range(12)]
    docs = [f"d{j}" for j in range(30)]
    lists = [{"0": list(rng.choice(docs, 10, replace=False)),
              "a": list(rng.choice(docs, 10, replace=False))} for _ in keys]
    truth = {k: {d: float(rng.random() < 0.3) for d in docs} for k in keys}
    rewards = {k: {d: truth[k][d] for d in lists[i]["0"][:3]} for i, k in enumerate(keys)}
    new = [(q, d) for q, ds in never_judged(keys, lists, rewards).items() for d in ds]

    def pay(pairs):
        return {q: {d: truth[q][d] for qq, d in pairs if qq == q} for q in {q for q, _ in pairs}}

    judged = judge_lists(keys, ["t"] * len(keys), lists, rewards, pay, new, needed=len(new),
                         base="0", names=("a",))
    assert judged.paid == judged.needed == len(new) and not judged.sampled
    (sampled,), p = judged.overall(np.random.default_rng(0))
    exact, _ = exact_gain([per["0"] for per in lists], [per["a"] for per in lists],
                          judged.judged, ["t"] * len(keys), np.random.default_rng(0))
    assert sampled.gain == pytest.approx(exact.gain, abs=1e-12)
    assert 0 <= p["a"] <= 1


def test_the_cap_is_split_by_task_so_a_large_task_cannot_take_a_small_ones_evidence():
    """1,000 new documents of one task, 20 of another, a cap of 40: each task gets its
    equal share (the small one all it needs, the large one the rest). A uniform sample
    would give the small task about one pair (40 x 20 / 1,020)."""
    pairs = [(f"big{i}", "d") for i in range(1000)] + [(f"small{i}", "d") for i in range(20)]
    task_of = {q: q.rstrip("0123456789") for q, _ in pairs}
    picked = sample_by_task(pairs, task_of, 40, np.random.default_rng(0))
    tasks = [task_of[q] for q, _ in picked]
    assert len(picked) == 40 and tasks.count("small") == 20 and tasks.count("big") == 20
    assert picked == sorted(picked, key=pairs.index)  # in the pairs' order


def test_task_shares_water_fill():
    assert task_shares({"a": 5, "b": 100, "c": 100}, 45) == {"a": 5, "b": 20, "c": 20}
    assert task_shares({"a": 5, "b": 6}, 100) == {"a": 5, "b": 6}
    assert task_shares({"a": 10, "b": 10, "c": 10}, 7) == {"a": 3, "b": 2, "c": 2}
    assert sum(task_shares({"a": 0, "b": 3}, 0).values()) == 0


def test_one_task_samples_draw_for_draw_as_before():
    pairs = [(f"q{i}", f"d{j}") for i in range(30) for j in range(3)]
    task_of = {q: "t" for q, _ in pairs}
    for within in (False, True):
        a = sample_by_task(pairs, task_of, 17, np.random.default_rng(3), draw_within_cap=within)
        b = sample_pairs(pairs, 17, np.random.default_rng(3), draw_within_cap=within)
        assert a == b


def test_a_filled_list_never_scores_above_the_ideal():
    """b = 1: each row has one judged document (a small reward) and the adapted list is
    ten unpaid documents whose kind's paid sample is relevant. Filled, the list may not
    score above the ideal DCG that holds those same fills: every row's Delta nDCG@10 lies
    in [-1, 1] (without the fills in the ideal: 1.3 and 44 per row)."""
    keys = [f"t/q{i}" for i in range(8)]
    lists = [{"0": [f"j{i}"] + [f"b{i}_{r}" for r in range(9)],
              "a": [f"n{i}_{r}" for r in range(10)]} for i in range(len(keys))]
    # the base list's other documents were judged irrelevant; only j{i} had a small gain
    rewards = {k: {f"j{i}": 0.1, **{f"b{i}_{r}": 0.0 for r in range(9)}}
               for i, k in enumerate(keys)}
    picked = [(keys[0], f"n0_{r}") for r in range(6)]  # a paid sample of the new kind

    def pay(pairs):
        out: dict[str, dict[str, float]] = {}
        for q, d in pairs:
            out.setdefault(q, {})[d] = 1.0
        return out

    new = [(q, d) for q, ds in never_judged(keys, lists, rewards).items() for d in ds]
    judged = judge_lists(keys, ["t"] * len(keys), lists, rewards, pay, picked,
                         needed=len(new), base="0", names=("a",))
    assert judged.sampled
    deltas = judged.parts.known[:, 0] + judged.parts.open[:, 0] * 1.0 - judged.parts.open_base
    assert np.all(deltas <= 1.0 + 1e-9) and np.all(deltas >= -1.0 - 1e-9)
    (gain,), _ = judged.overall(np.random.default_rng(0))
    assert 0 < gain.gain <= 1.0
