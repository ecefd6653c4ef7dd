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
uninterrupted run up to floating-point nondeterminism). It resumes only when the
configuration, the questions (their digest), the index embedder and the corpus fingerprint
all match the checkpoint's; otherwise a ConfigError names what differs (``overwrite``
restarts). Training holds the folder's writer lock (a second trainer gets a clear error)
and a kill during the checkpoint swap leaves the previous checkpoint, so no finished
epoch but the one being saved is lost.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tttembed.chain.checkpoint import (
    FORMAT,
    check_index,
    checkpoint_identity,
    load_encoder,
    load_optimizer,
    read_checkpoint_manifest,
    resume_point,
    save_optimizer,
)
from tttembed.chain.encoder import LoraQueryEncoder, LoraSettings, load_base_model
from tttembed.chain.forms import TEXT, check_form
from tttembed.chain.regimes import (
    NEEDS_RUN,
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
from tttembed.chain.search import Encode, Search, greedy_chain
from tttembed.chain.setup import DEFAULT_MAX_SEQ_LENGTH, ChainTask, StateTexts, state_texts
from tttembed.chain.states import gold_states, reached_states
from tttembed.core.errors import ConfigError
from tttembed.core.io import (
    atomic_directory,
    now_utc,
    versions,
    write_manifest,
    writer_lock,
)
from tttembed.core.progress import Progress, stage
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.types import ChainState, PathLike

if TYPE_CHECKING:
    from tttembed.index.base import Index

log = logging.getLogger(__name__)

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
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    state: str = TEXT                # the state form (tttembed.chain.forms) trained on
    seed: int = 0
    shared_negatives: bool = False
    base: str = DEFAULT_EMBEDDER
    lora: LoraSettings = field(default_factory=LoraSettings)

    def check(self) -> None:
        check_regime(self.regime)
        check_form(self.state, "state")
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


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["lora"]["target_modules"] = list(cfg.lora.target_modules)
    return d


def frozen_tops(states: list[ChainState], texts: StateTexts, frozen: Encode, search: Search,
                 cfg: TrainConfig, cache: dict[ChainState, list[int]]) -> list[list[int]]:
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


def _run_states(encoder: LoraQueryEncoder, task: ChainTask, texts: StateTexts, search: Search,
                steps: int, progress: Progress | None = None, name: str = "reached states"
                ) -> list[ChainState]:
    advance = stage(progress, name, steps * len(task.golds))
    run = greedy_chain(len(task.golds), texts, encoder.encode, search, steps, progress=advance)
    return reached_states(run.picked, task.golds)


@dataclass
class TrainSession:
    """What one training call carries from epoch to epoch."""

    task: ChainTask
    index: Index
    frozen: Encode
    cfg: TrainConfig
    steps: int
    states_from: PathLike | None
    encoder: LoraQueryEncoder
    opt: Any                                  # torch.optim.AdamW
    params: list[Any]                         # the trainable torch parameters
    texts: StateTexts
    passage_vecs: Any                         # torch tensor (n_docs, dim) on the device
    gold_half: list[ChainState]
    tops_cache: dict[ChainState, list[int]] = field(default_factory=dict)
    first_pool: list[ChainState] | None = None
    wrong_pool: list[list[int]] | None = None


def _open_session(task: ChainTask, index: Index, frozen: Encode, cfg: TrainConfig,
                  out: Path, start: int, states_from: PathLike | None
                  ) -> TrainSession:
    """The encoder (fresh, or the checkpoint's when resuming), its optimizer, the passage
    vectors on the encoder's device and the gold states."""
    import torch

    torch.manual_seed(cfg.seed)
    if start:
        encoder = load_encoder(out, max_seq_length=cfg.max_seq_length, trainable=True)
    else:
        model = load_base_model(cfg.base, max_seq_length=cfg.max_seq_length)
        encoder = LoraQueryEncoder(model, lora=cfg.lora)
    params = encoder.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    if start:
        load_optimizer(opt, params, out / "optimizer.safetensors")
    vecs = torch.from_numpy(index.get_vectors(np.arange(len(index)))).to(encoder.device)
    return TrainSession(task, index, frozen, cfg, cfg.steps or task.max_hops, states_from,
                    encoder, opt, params,
                    state_texts(task, encoder.model, cfg.max_seq_length, cfg.state),
                    vecs, gold_states(task.golds))


def _other_states(s: TrainSession, epoch: int, progress: Progress | None
                  ) -> tuple[list[ChainState], list[ChainState]]:
    """(reached-state pool, other half) of an epoch, as the regime asks."""
    cfg, task, search = s.cfg, s.task, s.index.search
    pool: list[ChainState] = []
    source = run_source(cfg.regime, epoch)
    if source == "current":
        pool = _run_states(s.encoder, task, s.texts, search, s.steps, progress,
                           f"epoch {epoch + 1}: reached states")
    elif source == "states_from":
        if s.first_pool is None:
            runner = load_encoder(s.states_from, max_seq_length=cfg.max_seq_length,
                                  index=s.index)
            s.first_pool = _run_states(runner, task, s.texts, search, s.steps, progress,
                                       "reached states (--states-from)")
            del runner
        pool = s.first_pool
    elif cfg.regime.startswith("synthetic") and s.wrong_pool is None:
        tops = frozen_tops([(qi, ()) for qi in range(len(task.golds))], s.texts, s.frozen,
                            search, replace(cfg, shared_negatives=False), s.tops_cache)
        s.wrong_pool = wrong_passages(tops, task.golds, cfg.neg_depth)
    other = other_half(cfg.regime, epoch, cfg.seed, s.gold_half, pool=pool,
                       golds=task.golds, wrong_pool=s.wrong_pool)
    return pool, other


def fit_epoch(s: TrainSession, states: list[ChainState], pos: np.ndarray, neg: np.ndarray, epoch: int,
         progress: Progress | None) -> float:
    """One pass of InfoNCE over ``states`` in seeded batches; the mean loss."""
    import torch

    cfg, device = s.cfg, s.encoder.device
    torch.manual_seed(cfg.seed * 1000 + epoch)
    order = epoch_rng(cfg.seed, epoch, 3).permutation(len(states))
    n_batches = (len(states) + cfg.batch_size - 1) // cfg.batch_size
    advance = stage(progress, f"epoch {epoch + 1}/{cfg.epochs}: batches", n_batches)
    s.encoder.model.train()
    losses = []
    for b in range(n_batches):
        idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
        q = s.encoder.forward(s.texts.texts([states[i] for i in idx]))
        loss = info_nce(q.float(), s.passage_vecs, torch.from_numpy(pos[idx]).to(device),
                        torch.from_numpy(neg[idx]).to(device), cfg.tau)
        s.opt.zero_grad()
        loss.backward()  # type: ignore[attr-defined]
        s.opt.step()
        losses.append(float(loss.detach()))  # type: ignore[attr-defined]
        advance(1)
    s.encoder.model.eval()
    return float(np.mean(losses))


def _epoch(s: TrainSession, epoch: int, progress: Progress | None) -> dict[str, Any]:
    """Train one epoch; its history row (states, digests, loss, seconds per phase)."""
    t0 = time.perf_counter()
    pool, other = _other_states(s, epoch, progress)
    t_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    states = s.gold_half + other
    tops = frozen_tops(states, s.texts, s.frozen, s.index.search, s.cfg, s.tops_cache)
    pos = positives(states, s.task.golds)
    neg = negatives(states, s.task.golds, tops, s.cfg.n_neg)
    t_neg = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss = fit_epoch(s, states, pos, neg, epoch, progress)
    timing = {"run": t_run, "negatives": t_neg, "train": time.perf_counter() - t0}
    log.info("epoch %d/%d: loss %.5f", epoch + 1, s.cfg.epochs, loss)
    return {"epoch": epoch + 1, "gold_states": len(s.gold_half), "other_states": len(other),
            "reached_pool": len(pool), "other_digest": states_digest(other),
            "pool_digest": states_digest(pool), "loss": round(loss, 5),
            "seconds": {k: round(v, 3) for k, v in timing.items()}}


def _manifest(s: TrainSession, config: dict[str, Any], history: list[dict[str, Any]]
              ) -> dict[str, Any]:
    return {"format": FORMAT, "format_version": 1, **checkpoint_identity(s.task, s.index, config),
            "epochs": s.cfg.epochs, "epochs_done": len(history), "history": history,
            "steps": s.steps,
            "states_from": None if s.states_from is None else str(s.states_from),
            "versions": versions(CHAIN_VERSIONED), "device": str(s.encoder.device),
            "created": now_utc()}


def write_checkpoint(out: Path, s: TrainSession, manifest: dict[str, Any]) -> None:
    with atomic_directory(out) as tmp:
        s.encoder.save(tmp / "adapter")
        save_optimizer(s.opt, s.params, tmp / "optimizer.safetensors")
        write_manifest(tmp, manifest)


def train_chain(task: ChainTask, index: Index, frozen: Encode, cfg: TrainConfig,
                out: PathLike, *,
                states_from: PathLike | None = None,
                progress: Progress | None = None, overwrite: bool = False) -> TrainResult:
    """Train (or resume) a LoRA query encoder for the chain retriever.

    ``index`` is the frozen passage index, ``frozen`` the frozen query encoder (texts ->
    unit vectors), ``states_from`` a gold-trained checkpoint that supplies the reached
    states of the static / resampled / on-policy regimes. ``progress`` gets a stage per
    epoch (total: batches) and per chain run that collects reached states (total: steps x
    questions). An existing ``out`` that is not a checkpoint of this configuration is
    refused unless ``overwrite``; the checkpoint is rewritten atomically after each epoch.
    """
    cfg.check()
    if cfg.regime in NEEDS_RUN and states_from is None:
        raise ConfigError(f"regime {cfg.regime!r} needs --states-from: a gold-trained "
                          "checkpoint (train one with --regime gold first)")
    if states_from is not None:
        check_index(read_checkpoint_manifest(states_from), f"--states-from {states_from}",
                    index, fix="give --states-from a checkpoint trained on this data's "
                               "index (train one: 'tttembed chain train DATA --regime gold "
                               "--out FOLDER' with the same --index)")
    out = Path(out)
    config = config_dict(replace(cfg, epochs=0))
    with writer_lock(out):
        start, history = resume_point(out, checkpoint_identity(task, index, config), overwrite)
        if start >= cfg.epochs:
            return TrainResult(out, start, history)
        session = _open_session(task, index, frozen, cfg, out, start, states_from)
        for epoch in range(start, cfg.epochs):
            history.append(_epoch(session, epoch, progress))
            write_checkpoint(out, session, _manifest(session, config, history))
    return TrainResult(out, cfg.epochs, history)


__all__ = ["FORMAT", "TrainConfig", "TrainResult", "load_encoder", "read_checkpoint_manifest",
           "train_chain"]
