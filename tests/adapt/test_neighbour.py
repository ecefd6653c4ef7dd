"""Neighbour transfer: an unseen query a few words from a rewarded one borrows its
query-wise vector; an unrelated one gets nothing; the exact text keeps its own vector.

Texts are embedded as the normalised sum of one seeded random vector per word, so a
paraphrase that changes one word of eight has cosine about 7/8 with the original and an
unrelated text about 0 (the floor is 0.8)."""

from __future__ import annotations

import hashlib

import numpy as np

from tttembed.adapt import AdaptState, apply_states, load_state
from tttembed.adapt.apply import lookup_keys
from tttembed.adapt.neighbour import FLOOR, neighbour_hyperparameters, neighbour_parts
from tttembed.adapt.scopes import alpha_from_counts, query_key

D = 256
TASK = "t"


def embed(text: str) -> np.ndarray:
    v = np.zeros(D)
    for w in text.split():
        seed = int(hashlib.sha256(w.encode()).hexdigest()[:8], 16)
        v += np.random.default_rng(seed).normal(size=D)
    return (v / np.linalg.norm(v)).astype(np.float32)


REWARDED = ["how do cats sleep during the long day",
            "which fish live in a cold water tank"]


def _state() -> AdaptState:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2, D)).astype(np.float32) * 0.3
    n_g = np.ones(2, np.int64)
    x = np.stack([embed(t) for t in REWARDED])
    return AdaptState("neighbour", tuple(query_key(TASK, t) for t in REWARDED), vectors,
                      alpha_from_counts(n_g), n_g, identity="test", dim=D,
                      hyperparameters={"neighbour": neighbour_hyperparameters()},
                      parts=neighbour_parts(x))


def _apply(state: AdaptState, texts: list[str], task: str = TASK) -> np.ndarray:
    x = np.stack([embed(t) for t in texts])
    keys = lookup_keys([state], texts, [task] * len(texts))
    return apply_states(x, keys, [state])


def _unit(u: np.ndarray) -> np.ndarray:
    return u / np.linalg.norm(u)


def test_a_paraphrase_borrows_its_neighbours_vector_and_an_unrelated_query_nothing():
    st = _state()
    para = "how do cats sleep during the whole day"      # one word changed
    other = "stock prices fell sharply on monday morning"
    assert float(embed(para) @ embed(REWARDED[0])) > FLOOR
    assert float(embed(other) @ embed(REWARDED[0])) < FLOOR
    got = _apply(st, [para, other, REWARDED[0]])
    # the paraphrase: the one neighbour's vector, alpha = n / (n + 1) with n = 1
    np.testing.assert_allclose(got[0], _unit(embed(para) + 0.5 * st.vectors[0]), atol=1e-5)
    np.testing.assert_allclose(got[1], embed(other), atol=1e-6)  # nothing
    np.testing.assert_allclose(got[2], _unit(embed(REWARDED[0]) + 0.5 * st.vectors[0]),
                               atol=1e-5)  # the exact text: its own vector


def test_neighbours_of_another_task_lend_nothing():
    st = _state()
    para = "how do cats sleep during the whole day"
    np.testing.assert_allclose(_apply(st, [para], task="other")[0], embed(para), atol=1e-6)


def test_two_neighbours_mix_by_cosine_weight():
    st = _state()
    near_both = " ".join(REWARDED[0].split()[:4] + REWARDED[1].split()[:4])
    got = _apply(st, [near_both])[0]
    x = embed(near_both)
    sims = np.stack([embed(t) for t in REWARDED]) @ x
    if (sims >= FLOOR).sum() < 2:  # halves of two texts: below the floor for both
        np.testing.assert_allclose(got, x, atol=1e-6)
        return
    w = np.exp(sims / 0.05)
    w /= w.sum()
    np.testing.assert_allclose(got, _unit(x + 0.5 * (w @ st.vectors)), atol=1e-5)


def test_neighbour_embeddings_survive_save_and_load(tmp_path):
    st = _state()
    back = load_state(st.save(tmp_path / "n.npz"))
    assert back.scope == "neighbour" and back.parts.neighbour_x.dtype == np.float16
    texts = ["how do cats sleep during the whole day", "unrelated words only here now"]
    np.testing.assert_allclose(_apply(back, texts), _apply(st, texts), atol=1e-6)


def test_an_alpha_chosen_by_the_guard_scales_the_transfer():
    from dataclasses import replace

    st = replace(_state(), alpha_chosen="0.2")
    para = "how do cats sleep during the whole day"
    got = _apply(st, [para])[0]
    np.testing.assert_allclose(got, _unit(embed(para) + 0.2 * st.vectors[0]), atol=1e-5)
    zero = _apply(replace(_state(), alpha_chosen="0"), [para])[0]
    np.testing.assert_allclose(zero, embed(para), atol=1e-6)
