"""``cross-encoder:NAME_OR_PATH``: a sentence-transformers ``CrossEncoder`` as a scorer.

The model's raw outputs (logits, taken with an identity activation whatever activation
the model's config names) are put on [0, 1] by one of these mappings:

- ``"sigmoid"`` (default for one output): reward = ``sigmoid(logit)``; mapping
  ``"sigmoid(logit)"``. Right for rerankers trained with a BCE loss on logits
  (the MS MARCO cross-encoders).
- ``"softmax"`` (default for two outputs): reward = softmax over the two logits, second
  class (``"relevant"``); mapping ``"softmax(logits)[1]"``.
- ``"clip"``: the raw score clipped to [0, 1], for models whose raw output is already a
  probability or a [0, 1] similarity; mapping ``"clip(score)"``.

Models with more than two outputs (NLI heads) are refused. Weights load from a local
folder or the local Hugging Face cache only (``local_files_only=True``).

Options: ``mapping``, ``batch_size`` (32), ``max_length``, ``device`` (cuda when
available, else cpu).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.devices import pick_device
from tttembed.core.errors import BackendError, ConfigError, MissingDependency
from tttembed.score.base import Item

MAPPINGS = {"sigmoid": "sigmoid(logit)", "softmax": "softmax(logits)[1]", "clip": "clip(score)"}


def to_unit(raw: np.ndarray, mapping: str) -> np.ndarray:
    """Map raw model outputs ((n,) or (n, 2)) to float64 rewards on [0, 1] (nan kept)."""
    raw = np.asarray(raw, dtype=np.float64)
    if mapping == "sigmoid":
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-raw))
    if mapping == "softmax":
        with np.errstate(over="ignore", invalid="ignore"):
            return 1.0 / (1.0 + np.exp(raw[:, 0] - raw[:, 1]))
    if mapping == "clip":
        return np.clip(raw, 0.0, 1.0)
    raise ConfigError(f"unknown mapping {mapping!r}; known: {', '.join(MAPPINGS)}")


class CrossEncoderScorer:
    """Scorer: a CrossEncoder's (query, document) score mapped to [0, 1]."""

    def __init__(self, rest: str, *, mapping: str | None = None, batch_size: int = 32,
                 max_length: int | None = None, device: str | None = None) -> None:
        if not rest:
            raise ConfigError("cross-encoder: spec needs a model folder or cached hub name, "
                              "e.g. 'cross-encoder:cross-encoder/ms-marco-MiniLM-L6-v2'")
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise MissingDependency("sentence-transformers", "rerank") from exc
        self.spec = f"cross-encoder:{rest}"
        self.batch_size = int(batch_size)
        device = pick_device(device)
        kwargs: dict[str, Any] = {"device": device, "local_files_only": True}
        if max_length is not None:
            kwargs["max_length"] = int(max_length)
        try:
            self.model = CrossEncoder(rest, **kwargs)
        except (OSError, ValueError) as exc:
            raise BackendError(
                f"cannot load cross-encoder {rest!r}: {str(exc).splitlines()[0] if str(exc) else exc}"
                " (give a local folder, or a hub name already in the local cache)") from exc
        self.model.eval()
        self.num_labels = int(self.model.num_labels)
        if self.num_labels not in (1, 2):
            raise ConfigError(f"cross-encoder {rest!r} has {self.num_labels} outputs; "
                              "a relevance scorer needs 1 (logit) or 2 (not relevant, relevant)")
        default = "sigmoid" if self.num_labels == 1 else "softmax"
        self.kind = mapping or default
        if self.kind not in MAPPINGS:
            raise ConfigError(f"unknown mapping {self.kind!r}; known: {', '.join(MAPPINGS)}")
        if (self.kind == "softmax") != (self.num_labels == 2):
            raise ConfigError(f"mapping {self.kind!r} does not fit a model with "
                              f"{self.num_labels} output(s); use "
                              + ("'softmax'" if self.num_labels == 2 else "'sigmoid' or 'clip'"))
        self.mapping = MAPPINGS[self.kind]
        self.identity = identity(self.spec,
                                 mapping=self.kind if self.kind != default else None,
                                 max_length=None if max_length is None else int(max_length))

    def raw(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        """The model's raw outputs (logits) for the pairs: (n,) or (n, 2)."""
        import torch

        from tttembed.core.devices import use_threads

        pairs = [(query.text, d.text) for d in docs]
        if not pairs:
            return np.zeros((0,) if self.num_labels == 1 else (0, 2), dtype=np.float64)
        use_threads()
        with torch.inference_mode():
            out = self.model.predict(pairs, batch_size=self.batch_size,
                                     activation_fn=torch.nn.Identity(),
                                     show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64)

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        return to_unit(self.raw(query, docs), self.kind).reshape(len(docs))


def from_spec(rest: str, **options: Any) -> CrossEncoderScorer:
    return CrossEncoderScorer(rest, **options)
