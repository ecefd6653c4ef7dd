"""Training the chain retriever's query encoder (LoRA) on gold / reached / synthetic states.

Output folder (a checkpoint, rewritten atomically after every epoch)::

    manifest.json            format, config, base model, index identity and corpus
                             fingerprint, epochs done, per-epoch stats (states, loss, time
                             spent in the run / negatives / training), versions
    adapter/                 LoRA adapter (save_pretrained: adapter_model.safetensors)
    optimizer.safetensors    AdamW moments and step per trainable tensor

Per-epoch stats also hold ``other_digest`` and ``pool_digest`` (``states_digest`` of the
epoch's other half and of its reached-state pool): equal digests in two epochs mean the
regime reused its states, different ones that it redrew them. Checkpoints written
before these keys existed resume unchanged (old entries simply lack them).

Resume: calling ``train_chain`` again with the same config continues after the last
finished epoch (all randomness is derived from (seed, epoch), so the result matches an
uninterrupted run up to floating-point nondeterminism).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.chain.encoder import LoraQueryEncoder, LoraSettings, load_base_model
from tttembed.chain.regimes import (
    NEEDS_RUN,
    State,
    check_regime,
    epoch_rng,
    frozen_key,
    info_nce,
    negatives,
    other_half,
    positives,
    run_source,
    states_digest,
    wrong_passages,
)
from tttembed.chain.search import greedy_chain
from tttembed.chain.setup import ChainTask, StateTexts, state_texts
from tttembed.chain.states import gold_states, reached_states
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.core.errors import ConfigError, StateMismatch
from tttembed.core.io import atomic_directory
from tttembed.reporting import versions

FORMAT = "tttembed-chain-encoder"
MANIFEST = "manifest.json"

Progress = Callable[[str, int, int], None]   # (phase, done, total)

#: Distributions whose versions a checkpoint manifest records (besides tttembed, python).
CHAIN_VERSIONED = ("numpy", "torch", "transformers", "sentence-transformers", "peft")


@dataclass(frozen=True)
class TrainConfig:
    regime: str = "gold"
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-4
    tau: float = 0.05
    n_neg: int = 32
    neg_depth: int = 100
    steps: int = 0                   # chain steps T for runs; 0 = the data's max hops
    max_seq_length: int = 256
    seed: int = 0
    shared_negatives: bool = False
    base: str = DEFAULT_EMBEDDER
    lora: LoraSettings = field(default_factory=LoraSettings)

    def check(self) -> None:
        check_regime(self.regime)
        for name in ("epochs", "batch_size", "n_neg", "neg_depth", "max_seq_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if not (self.tau > 0 and self.lr > 0):
            raise ConfigError("tau and lr must be positive")


@dataclass(frozen=True)
class TrainResult:
    path: Path
    epochs_done: int
    history: list[dict[str, Any]]


def _config_dict(cfg: TrainConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["lora"]["target_modules"] = list(cfg.lora.target_modules)
    return d


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    mpath = Path(path) / MANIFEST
    if not mpath.is_file():
        raise ConfigError(f"{path} is not a chain encoder checkpoint (no {MANIFEST}); "
                          "train one with 'tttembed chain train'")
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{mpath} is not a chain encoder manifest")
    return manifest


def load_encoder(path: str | os.PathLike[str] | None, *, base: str = DEFAULT_EMBEDDER,
                 max_seq_length: int = 256, trainable: bool = False,
                 index: Any = None) -> LoraQueryEncoder:
    """A query encoder: the checkpoint's adapter on a fresh base model, or (path None) a
    fresh adapter, which encodes exactly like the frozen model. With ``index`` the
    checkpoint must have been trained against the same passage index."""
    if path is None:
        return LoraQueryEncoder(load_base_model(base, max_seq_length=max_seq_length))
    manifest = read_manifest(path)
    if index is not None and manifest["index_embedder"] != index.identity:
        raise StateMismatch(f"checkpoint {path} was trained for passages of "
                            f"{manifest['index_embedder']!r}, the index holds "
                            f"{index.identity!r}")
    model = load_base_model(manifest["config"]["base"], max_seq_length=max_seq_length)
    return LoraQueryEncoder(model, adapter=Path(path) / "adapter", trainable=trainable)


def _save_optimizer(opt: Any, params: list[Any], path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for i, p in enumerate(params):
        for key, value in opt.state.get(p, {}).items():
            tensors[f"{i}.{key}"] = value.detach().cpu().reshape(-1).clone() \
                if key == "step" else value.detach().cpu().contiguous()
    save_file(tensors, str(path))


def _load_optimizer(opt: Any, params: list[Any], path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    for i, p in enumerate(params):
        state = {}
        for key in ("step", "exp_avg", "exp_avg_sq"):
            if f"{i}.{key}" in tensors:
                t = tensors[f"{i}.{key}"]
                state[key] = t.reshape(()) if key == "step" else t.to(p.device)
        if state:
            opt.state[p] = state


def _frozen_tops(states: list[State], texts: StateTexts, frozen: Callable[[list[str]], Any],
                 search: Any, cfg: TrainConfig, cache: dict[State, list[int]]) -> list[list[int]]:
    """Frozen top rows per state (memoised); the shared pool uses the question alone."""
    keys = [frozen_key(s, cfg.shared_negatives) for s in states]
    todo = sorted({k for k in keys if k not in cache})
    for start in range(0, len(todo), 256):
        chunk = todo[start:start + 256]
        Q = frozen(texts.texts(chunk))
        _, ids = search(np.ascontiguousarray(Q, dtype=np.float32),
                      cfg.neg_depth + max(len(h) for _, h in chunk))
        for key, row in zip(chunk, ids):
            cache[key] = [int(r) for r in row[:cfg.neg_depth + len(key[1])]]
    return [cache[k] for k in keys]


def _run_states(encoder: LoraQueryEncoder, task: ChainTask, texts: StateTexts, search: Any,
                steps: int) -> list[State]:
    run = greedy_chain(len(task.golds), texts, encoder.encode, search, steps)
    return reached_states(run.picked, task.golds)


def train_chain(task: ChainTask, index: Any, frozen: Callable[[list[str]], Any],
                cfg: TrainConfig, out: str | os.PathLike[str], *,
                states_from: str | os.PathLike[str] | None = None,
                progress: Progress | None = None, overwrite: bool = False) -> TrainResult:
    """Train (or resume) a LoRA query encoder for the chain retriever.

    ``index`` is the frozen passage index (``IndexHandle``), ``frozen`` the frozen query
    encoder (texts -> unit vectors), ``states_from`` a gold-trained checkpoint that supplies
    the reached states of the static / resampled / on-policy regimes.
    """
    import torch

    cfg.check()
    if cfg.regime in NEEDS_RUN and states_from is None:
        raise ConfigError(f"regime {cfg.regime!r} needs --states-from: a gold-trained "
                          "checkpoint (train one with --regime gold first)")
    out = Path(out)
    steps = cfg.steps or task.max_hops
    config = _config_dict(replace(cfg, epochs=0))
    start, history = 0, []
    manifest: dict[str, Any] | None = None
    if (out / MANIFEST).is_file() and not overwrite:
        manifest = read_manifest(out)
        if manifest["config"] != config or manifest.get("n_questions") != len(task.golds):
            raise ConfigError(f"{out} holds a checkpoint with another configuration; pass "
                              "--overwrite or another --out folder")
        start, history = int(manifest["epochs_done"]), list(manifest["history"])
    if start >= cfg.epochs:
        return TrainResult(out, start, history)
    torch.manual_seed(cfg.seed)
    search = index.search
    if start:
        encoder = load_encoder(out, max_seq_length=cfg.max_seq_length, trainable=True)
    else:
        model = load_base_model(cfg.base, max_seq_length=cfg.max_seq_length)
        encoder = LoraQueryEncoder(model, lora=cfg.lora)
    texts = state_texts(task, encoder.model, cfg.max_seq_length)
    params = encoder.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    if start:
        _load_optimizer(opt, params, out / "optimizer.safetensors")
    device = encoder.device
    passage_vecs = torch.from_numpy(np.array(index.vectors, dtype=np.float32)).to(device)
    gold_half = gold_states(task.golds)
    tops_cache: dict[State, list[int]] = {}
    first_pool: list[State] | None = None
    wrong_pool: list[list[int]] | None = None
    for epoch in range(start, cfg.epochs):
        timing = {"run": 0.0, "negatives": 0.0, "train": 0.0}
        t0 = time.perf_counter()
        pool: list[State] = []
        source = run_source(cfg.regime, epoch)
        if source == "current":
            pool = _run_states(encoder, task, texts, search, steps)
        elif source == "states_from":
            if first_pool is None:
                runner = load_encoder(states_from, max_seq_length=cfg.max_seq_length,
                                      index=index)
                first_pool = _run_states(runner, task, texts, search, steps)
                del runner
            pool = first_pool
        elif cfg.regime.startswith("synthetic") and wrong_pool is None:
            tops = _frozen_tops([(qi, ()) for qi in range(len(task.golds))], texts, frozen,
                                search, replace(cfg, shared_negatives=False), tops_cache)
            wrong_pool = wrong_passages(tops, task.golds, cfg.neg_depth)
        other = other_half(cfg.regime, epoch, cfg.seed, gold_half, pool=pool,
                           golds=task.golds, wrong_pool=wrong_pool)
        timing["run"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        states = gold_half + other
        tops = _frozen_tops(states, texts, frozen, search, cfg, tops_cache)
        pos = positives(states, task.golds)
        neg = negatives(states, task.golds, tops, cfg.n_neg)
        timing["negatives"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        torch.manual_seed(cfg.seed * 1000 + epoch)
        order = epoch_rng(cfg.seed, epoch, 3).permutation(len(states))
        encoder.model.train()
        losses = []
        n_batches = (len(states) + cfg.batch_size - 1) // cfg.batch_size
        for b in range(n_batches):
            idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            q = encoder.forward(texts.texts([states[i] for i in idx]))
            loss = info_nce(q.float(), passage_vecs, torch.from_numpy(pos[idx]).to(device),
                            torch.from_numpy(neg[idx]).to(device), cfg.tau)
            opt.zero_grad()
            loss.backward()  # type: ignore[attr-defined]
            opt.step()
            losses.append(float(loss.detach()))  # type: ignore[attr-defined]
            if progress is not None:
                progress(f"epoch {epoch + 1}/{cfg.epochs}", b + 1, n_batches)
        encoder.model.eval()
        timing["train"] = time.perf_counter() - t0
        history.append({"epoch": epoch + 1, "gold_states": len(gold_half),
                        "other_states": len(other), "reached_pool": len(pool),
                        "other_digest": states_digest(other),
                        "pool_digest": states_digest(pool),
                        "loss": round(float(np.mean(losses)), 5),
                        "seconds": {k: round(v, 3) for k, v in timing.items()}})
        manifest = {"format": FORMAT, "format_version": 1, "config": config,
                    "epochs": cfg.epochs, "epochs_done": epoch + 1, "history": history,
                    "n_questions": len(task.golds), "steps": steps,
                    "index_embedder": index.identity,
                    "corpus_fingerprint": index.manifest.get("corpus_fingerprint"),
                    "states_from": None if states_from is None else str(states_from),
                    "versions": versions(CHAIN_VERSIONED), "device": str(device),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _write_checkpoint(out, encoder, opt, params, manifest)
    return TrainResult(out, cfg.epochs, history)


def _write_checkpoint(out: Path, encoder: LoraQueryEncoder, opt: Any, params: list[Any],
                      manifest: dict[str, Any]) -> None:
    with atomic_directory(out) as tmp:
        encoder.save(tmp / "adapter")
        _save_optimizer(opt, params, tmp / "optimizer.safetensors")
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                    encoding="utf-8")

__all__ = ["FORMAT", "TrainConfig", "TrainResult", "load_encoder", "read_manifest",
           "train_chain"]
