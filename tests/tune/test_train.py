"""The contrastive fine-tune (tune/train.py) on the bundled MiniLM: it learns, it is
deterministic for a seed, the adapter leaves the passage side alone, bad settings are
refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tttembed.core.errors import ConfigError, DataError
from tttembed.tune.pairs import Triplet
from tttembed.tune.train import FULL, QUERY_LORA, TuneSettings, fine_tune

pytestmark = pytest.mark.model

ROWS = [Triplet(f"which {w} grows in the desert", f"the {w} survives dry sand and heat",
                f"the harbour {w} freezes in winter")
        for w in ("cactus", "agave", "yucca", "acacia", "sage", "date palm", "aloe", "ocotillo")]


def _margin(tuned, rows=ROWS) -> float:
    """Mean cos(query, positive) - cos(query, negative), both sides by the tuned model
    (the adapter: passages by the frozen model, as the index holds them)."""
    q = tuned.encode_queries([r.anchor for r in rows])
    if tuned.encoder is not None:
        import torch

        with torch.no_grad(), tuned.encoder.peft_model.disable_adapter():
            p = tuned.encoder.encode([r.positive for r in rows])
            n = tuned.encoder.encode([r.negative for r in rows])
    else:
        p = tuned.encode_queries([r.positive for r in rows])
        n = tuned.encode_queries([r.negative for r in rows])
    return float(np.mean(np.sum(q * p, 1) - np.sum(q * n, 1)))


@pytest.mark.parametrize("settings", [QUERY_LORA, FULL], ids=["query-lora", "full"])
def test_a_fine_tune_separates_positives_from_hard_negatives_and_repeats_itself(settings):
    s = replace(settings, epochs=4, batch_size=4, lr=settings.lr * 10)
    base = fine_tune(ROWS, replace(s, lr=1e-12, epochs=1))  # all but untouched
    a, b = fine_tune(ROWS, s), fine_tune(ROWS, s)
    assert _margin(a) > _margin(base) + 0.05
    assert a.losses[-1] < a.losses[0]
    assert len(a.losses) == 4 * 2  # 8 rows in batches of 4, four epochs
    np.testing.assert_array_equal(a.encode_queries(["dry sand"]), b.encode_queries(["dry sand"]))
    assert a.losses == b.losses
    other = fine_tune(ROWS, replace(s, seed=1))
    assert other.losses != a.losses


def test_the_adapter_changes_queries_only():
    tuned = fine_tune(ROWS, replace(QUERY_LORA, epochs=3, batch_size=4, lr=2e-3))
    import torch

    text = ["the cactus survives dry sand and heat"]
    with torch.no_grad(), tuned.encoder.peft_model.disable_adapter():
        frozen = tuned.encoder.encode(text)
    fresh = fine_tune(ROWS, replace(QUERY_LORA, lr=1e-12, epochs=1))
    with torch.no_grad(), fresh.encoder.peft_model.disable_adapter():
        np.testing.assert_allclose(frozen, fresh.encoder.encode(text), atol=1e-6)
    assert np.abs(tuned.encode_queries(text) - frozen).max() > 1e-3


def test_bad_settings_and_no_rows_are_refused():
    with pytest.raises(ConfigError, match="mode"):
        fine_tune(ROWS, TuneSettings(mode="encoder"))
    with pytest.raises(ConfigError, match="batch_size"):
        fine_tune(ROWS, TuneSettings(batch_size=0))
    with pytest.raises(DataError, match="no triplets"):
        fine_tune([], FULL)


def test_the_adapter_reads_given_passage_vectors_instead_of_encoding_them():
    s = replace(QUERY_LORA, epochs=2, batch_size=4)
    own = fine_tune(ROWS, s)
    with_vectors = fine_tune(ROWS, s, passages=_frozen_vectors())
    np.testing.assert_allclose(own.losses, with_vectors.losses, atol=1e-4)
    # vectors that are not the model's change what it learns: they are used, not re-encoded
    flipped = {t: -v for t, v in _frozen_vectors().items()}
    assert fine_tune(ROWS, s, passages=flipped).losses[0] > own.losses[0] + 0.5


def _frozen_vectors() -> dict:
    from tttembed.chain.encoder import load_base_model

    model = load_base_model(QUERY_LORA.base)
    texts = [t for r in ROWS for t in (r.positive, r.negative)]
    vecs = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    return dict(zip(texts, vecs))
