"""The chain retriever's query encoder: a sentence-transformers model with a LoRA adapter.

Only the query side is trained: passage vectors come from the frozen base model (the
passage index), and the LoRA adapter (``peft``) sits on the attention projections of the
transformer (``query``, ``key``, ``value`` in BERT models). A fresh adapter starts with
``B = 0``, so an untrained ``LoraQueryEncoder`` encodes exactly like the frozen model.

Adapters are saved with ``save_pretrained`` (``adapter_model.safetensors`` +
``adapter_config.json``); no pickle anywhere.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, MissingDependency


@dataclass(frozen=True)
class LoraSettings:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] = field(default=("query", "key", "value"))


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise MissingDependency("peft", "chain") from exc
    return peft


def _load_adapter(peft: Any, base: Any, path: Path, trainable: bool) -> Any:
    """The adapter at ``path`` on ``base``; an adapter that does not fit the base model
    (other target modules, rank or width: PEFT's ValueError / RuntimeError) is one
    ConfigError naming the folder, both models and the fix."""
    try:
        return peft.PeftModel.from_pretrained(base, str(path), is_trainable=trainable)
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:
        config = path / "adapter_config.json"
        try:
            trained_on = json.loads(config.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            trained_on = None
        name = getattr(getattr(base, "config", None), "_name_or_path", "") or "?"
        detail = " ".join(str(exc).split())[:200]
        raise ConfigError(
            f"{path}: the LoRA adapter does not fit the base model {name!r} (adapter made "
            f"for {trained_on or 'an unknown model'!r}: {detail}); load it on the base "
            "model it was trained on, or train one for this model with 'tttembed chain "
            "train'") from exc


def sentence_vectors(model: Any, texts: Sequence[str]) -> Any:
    """Unit sentence vectors of ``texts`` by a SentenceTransformer, as a torch tensor (n, d)
    with gradient (train or eval mode as the caller set it)."""
    import torch

    from tttembed.core.devices import use_threads

    use_threads()
    features = model.tokenize(list(texts))
    features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v
                for k, v in features.items()}
    out = model(features)["sentence_embedding"]
    return torch.nn.functional.normalize(out, dim=-1)


class LoraQueryEncoder:
    """A SentenceTransformer whose transformer carries a LoRA adapter.

    ``encode(texts)`` -> float32 (n, d) unit vectors (no gradient, eval mode);
    ``forward(texts)`` -> torch tensor (n, d) unit vectors with gradient (train mode set
    by the caller). ``adapter`` is an adapter folder to load, else a fresh adapter.
    """

    def __init__(self, model: Any, *, lora: LoraSettings = LoraSettings(),
                 adapter: str | Path | None = None, trainable: bool = False,
                 batch_size: int = 64) -> None:
        peft = _peft()
        self.model = model
        self.batch_size = int(batch_size)
        base = model[0].auto_model
        if isinstance(base, peft.PeftModel):
            raise ConfigError("the model already carries an adapter; load a fresh base model")
        if adapter is not None:
            path = Path(adapter)
            if not (path / "adapter_config.json").is_file():
                raise ConfigError(f"{path} holds no LoRA adapter (adapter_config.json "
                                  "missing); give a folder written by 'tttembed chain train'")
            wrapped = _load_adapter(peft, base, path, trainable)
        else:
            config = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha,
                                     lora_dropout=lora.dropout,
                                     target_modules=list(lora.target_modules))
            wrapped = peft.get_peft_model(base, config)
        model[0].auto_model = wrapped
        self.peft_model = wrapped
        self.model.eval()

    @property
    def device(self) -> Any:
        return self.model.device

    def trainable_parameters(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def forward(self, texts: Sequence[str]) -> Any:
        return sentence_vectors(self.model, texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), np.float32)
        was_training = self.model.training
        self.model.eval()
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), 0), np.float32)
        parts = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                idx = order[start:start + self.batch_size]
                parts.append(self.forward([texts[i] for i in idx]).float().cpu().numpy())
        vecs = np.concatenate(parts)
        out = np.empty_like(vecs)
        out[order] = vecs
        if was_training:
            self.model.train()
        return out.astype(np.float32)

    def save(self, path: str | Path) -> None:
        self.peft_model.save_pretrained(str(path), safe_serialization=True)


_BASE_MODELS: dict[tuple[str, str], Any] = {}


def load_base_model(spec: str, *, max_seq_length: int = 256, device: str | None = None) -> Any:
    """A fresh SentenceTransformer for an ``st:`` spec (the base of the query encoder).

    The model is read from disk once per process; every call returns a deep copy."""
    from tttembed.core.devices import pick_device
    from tttembed.embed.st import load_sentence_transformer

    scheme, _, rest = spec.partition(":")
    if scheme != "st":
        raise ConfigError(f"the chain retriever trains sentence-transformers models only; "
                          f"got {spec!r}, use an 'st:' spec such as st:bundled:all-MiniLM-L6-v2")
    device = pick_device(device)
    key = (rest, device)
    if key not in _BASE_MODELS:
        _BASE_MODELS[key] = load_sentence_transformer(rest, device=device)
    model = copy.deepcopy(_BASE_MODELS[key])  # a private copy: adapters are attached in place
    model.max_seq_length = int(max_seq_length)
    return model


__all__ = ["LoraQueryEncoder", "LoraSettings", "load_base_model", "sentence_vectors"]
