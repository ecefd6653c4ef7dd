"""Training the chain encoder on the states its served versions reached (learning from
traffic, ``tttembed loop --chain``): the LoRA training of :mod:`tttembed.chain.train`
(its InfoNCE, batches, optimizer and the write-up's hyperparameters, :class:`TrainConfig`'s
defaults), on given states instead of a regime's, warm-started from the served version.

A training example is a state the served encoder encoded (question + the passages its
chain had picked, text for text as served: :func:`tttembed.chain.traffic.served_states`)
and the question's relevant passages in the order its served list ranked them (the judge's
and people's labels): the positive is the earliest relevant passage the state does not
hold yet, the negatives the write-up's rule (the frozen encoder's top candidates for the
state minus every relevant passage and minus the history,
:func:`tttembed.chain.regimes.negatives`). Only the query encoder changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tttembed.chain.checkpoint import FORMAT, checkpoint_identity, load_encoder
from tttembed.chain.encoder import LoraQueryEncoder, load_base_model
from tttembed.chain.regimes import negatives, positives, states_digest
from tttembed.chain.search import Encode
from tttembed.chain.setup import ChainTask
from tttembed.chain.states import StateTexts, TokenBudget, missing_gold
from tttembed.chain.train import (
    CHAIN_VERSIONED,
    TrainConfig,
    TrainSession,
    config_dict,
    fit_epoch,
    frozen_tops,
    write_checkpoint,
)
from tttembed.core.errors import DataError
from tttembed.core.io import now_utc, versions
from tttembed.data.chains import Chain
from tttembed.types import ChainState

if TYPE_CHECKING:
    from tttembed.index.base import Index

#: The regime a checkpoint trained from traffic records.
REGIME = "traffic"


@dataclass(frozen=True)
class TrafficSet:
    """What one training from traffic reads: the questions (texts), each one's relevant
    passages (index rows, in served-list order), and the served states (question index,
    history rows), each still missing a relevant passage."""

    questions: list[str]
    relevant: list[list[int]]
    states: list[ChainState]

    @classmethod
    def build(cls, served: list[tuple[str, list[int]]], relevant: dict[str, list[int]]
              ) -> TrafficSet:
        """From served chains ``(question, chain rows in hop order)`` and each question's
        relevant rows: every state the chain encoded (``hops[:t]``, t = 0..T-1) that still
        misses a relevant passage, deduplicated, in order."""
        index: dict[str, int] = {}
        states: list[ChainState] = []
        seen: set[ChainState] = set()
        for question, hops in served:
            gold = relevant.get(question, [])
            if not gold:
                continue
            qi = index.setdefault(question, len(index))
            for t in range(len(hops)):
                key = (qi, tuple(int(r) for r in hops[:t]))
                if key not in seen and missing_gold(key[1], gold):
                    seen.add(key)
                    states.append(key)
        questions = list(index)
        return cls(questions, [list(relevant[q]) for q in questions], states)


def state_texts_for(data: TrafficSet, passages: list[str], model: Any,
                    max_seq_length: int) -> StateTexts:
    """The state texts of ``data``'s questions, cut as the server cut them."""
    return StateTexts(data.questions, passages,
                      budget=TokenBudget.for_model(model, max_seq_length))


def _task(data: TrafficSet, passages: list[str]) -> ChainTask:
    chains = [Chain(f"t{i}", q, tuple(str(r) for r in rel))
              for i, (q, rel) in enumerate(zip(data.questions, data.relevant))]
    return ChainTask(chains, data.relevant, passages)


def _encoder(warm: Path | None, cfg: TrainConfig, index: Index) -> LoraQueryEncoder:
    if warm is None:
        return LoraQueryEncoder(load_base_model(cfg.base, max_seq_length=cfg.max_seq_length),
                                lora=cfg.lora)
    return load_encoder(warm, max_seq_length=cfg.max_seq_length, trainable=True, index=index)


def train_traffic(data: TrafficSet, passages: list[str], index: Index, frozen: Encode,
                  cfg: TrainConfig, out: Path, *, warm: Path | None, steps: int,
                  max_seq_length: int) -> dict[str, Any]:
    """Train ``cfg.epochs`` epochs on ``data``'s states (warm-started from the checkpoint
    ``warm``, a fresh adapter when None) with the served state token limit
    ``max_seq_length``; write the checkpoint to ``out`` (recording ``steps``, the T the
    served chains ran); its manifest."""
    import torch

    if not data.states:
        raise DataError("no served chain state misses a relevant passage: nothing to learn",
                        fix="let more chain searches be judged")
    cfg = replace(cfg, regime=REGIME, max_seq_length=int(max_seq_length))
    torch.manual_seed(cfg.seed)
    encoder = _encoder(warm, cfg, index)
    params = encoder.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    vecs = torch.from_numpy(index.get_vectors(np.arange(len(index)))).to(encoder.device)
    task = _task(data, passages)
    texts = state_texts_for(data, passages, encoder.model, cfg.max_seq_length)
    s = TrainSession(task, index, frozen, cfg, steps, None, encoder, opt, params, texts, vecs, [])
    history = []
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        tops = frozen_tops(data.states, texts, frozen, index.search, cfg, s.tops_cache)
        pos = positives(data.states, data.relevant)
        neg = negatives(data.states, data.relevant, tops, cfg.n_neg)
        loss = fit_epoch(s, data.states, pos, neg, epoch, None)
        history.append({"epoch": epoch + 1, "states": len(data.states),
                        "states_digest": states_digest(data.states), "loss": round(loss, 5),
                        "seconds": round(time.perf_counter() - t0, 3)})
    config = config_dict(replace(cfg, epochs=0))
    manifest = {"format": FORMAT, "format_version": 1,
                **checkpoint_identity(task, index, config), "epochs": cfg.epochs,
                "epochs_done": cfg.epochs, "history": history, "steps": int(steps),
                "states_from": None if warm is None else str(warm),
                "versions": versions(CHAIN_VERSIONED), "device": str(encoder.device),
                "created": now_utc()}
    write_checkpoint(Path(out), s, manifest)
    return manifest


__all__ = ["REGIME", "TrafficSet", "state_texts_for", "train_traffic"]
