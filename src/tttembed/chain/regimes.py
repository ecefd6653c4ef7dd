"""Training states and contrastive examples for each regime (pure: arrays and callables).

A state is ``(qi, history)`` with ``history`` a tuple of index rows in step order.

* positive: the earliest gold passage (chain order) not in the history;
* negatives (one fixed rule in every regime): the frozen encoder's top ``neg_depth`` rows
  for the state text (or, with a shared pool, for the question alone), minus every gold
  passage of the question (the positive, the other missing gold and gold already in the
  history) and minus the history; the first ``n_neg`` in frozen rank order are kept.

Regimes (every one keeps the fixed gold half; the other half has as many states):

==================== ==============================================================
gold                 gold-history states only (no other half)
synthetic            gold histories with one wrong passage inserted, drawn once
synthetic-resampled  the same, drawn afresh every epoch
static               states reached by the gold-trained encoder, sampled once
resampled            the same first run's states, resampled every epoch
on-policy            epoch 1: the gold-trained encoder's states; later epochs: a fresh
                     run of the current encoder (the method)
==================== ==============================================================

``other_half`` picks an epoch's other half from the pool (or the synthetic inputs) it is
given; ``run_source`` says which chain run supplies that pool. Every draw is a function
of (seed, epoch), so a resumed training replays exactly the same states:

* reached-state regimes: ``epoch_rng(seed, e, 1)`` with ``e = 0`` for static (one sample,
  reused) and ``e = epoch`` for resampled / on-policy;
* synthetic regimes: ``epoch_rng(seed, e, 2)`` with ``e = epoch`` for synthetic-resampled
  and ``e = 0`` for synthetic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np

from tttembed.chain.states import missing_gold
from tttembed.core.errors import ConfigError
from tttembed.types import ChainState

REGIMES = ("gold", "synthetic", "synthetic-resampled", "static", "resampled", "on-policy")
NEEDS_RUN = ("static", "resampled", "on-policy")



def epoch_rng(seed: int, epoch: int, salt: int = 0) -> np.random.Generator:
    """Every random draw is a function of (seed, epoch): resume replays it exactly."""
    return np.random.default_rng([int(seed), int(epoch), int(salt)])


def sample_states(pool: Sequence[ChainState], size: int, rng: np.random.Generator) -> list[ChainState]:
    """Uniform sample without replacement (all of the pool when it is smaller), pool order."""
    if len(pool) <= size:
        return list(pool)
    idx = np.sort(rng.choice(len(pool), size=size, replace=False))
    return [pool[i] for i in idx]


def synthetic_states(golds: Sequence[Sequence[int]], gold_half: Sequence[ChainState],
                     wrong_pool: Sequence[Sequence[int]], size: int,
                     rng: np.random.Generator) -> list[ChainState]:
    """Gold histories with one wrong passage inserted at a random position.

    ``wrong_pool[qi]`` lists candidate wrong rows for question qi (its frozen top passages,
    gold removed). Gold states are drawn uniformly (with replacement only when
    ``size`` exceeds their number); duplicates are dropped.
    """
    usable = [s for s in gold_half if len(wrong_pool[s[0]])]
    if not usable:
        return []
    picks = rng.choice(len(usable), size=size, replace=size > len(usable))
    out: list[ChainState] = []
    seen: set[ChainState] = set()
    for i in picks:
        qi, hist = usable[int(i)]
        choices = [r for r in wrong_pool[qi] if r not in hist]
        if not choices:
            continue
        wrong = int(choices[int(rng.integers(len(choices)))])
        pos = int(rng.integers(len(hist) + 1))
        state = (qi, (*hist[:pos], wrong, *hist[pos:]))
        if missing_gold(state[1], golds[qi]) and state not in seen:
            seen.add(state)
            out.append(state)
    return out


def check_regime(regime: str) -> None:
    if regime not in REGIMES:
        raise ConfigError(f"unknown regime {regime!r}; choose one of {', '.join(REGIMES)}")


def run_source(regime: str, epoch: int) -> str | None:
    """Which chain run supplies the reached-state pool of ``epoch`` (0-based).

    ``"states_from"``: the gold-trained checkpoint's run (static and resampled in every
    epoch, on-policy in the first); ``"current"``: a fresh run of the encoder being
    trained (on-policy after the first epoch); ``None``: the regime needs no run.
    """
    check_regime(regime)
    if regime not in NEEDS_RUN:
        return None
    return "current" if regime == "on-policy" and epoch > 0 else "states_from"


def other_half(regime: str, epoch: int, seed: int, gold_half: Sequence[ChainState], *,
               pool: Sequence[ChainState] | None = None,
               golds: Sequence[Sequence[int]] | None = None,
               wrong_pool: Sequence[Sequence[int]] | None = None) -> list[ChainState]:
    """The states trained next to the fixed gold half in ``epoch`` (0-based).

    Reached-state regimes (static, resampled, on-policy) sample ``len(gold_half)`` states
    from ``pool`` (see ``run_source`` for which run supplies it); synthetic regimes insert
    one wrong passage from ``wrong_pool`` into gold histories (``golds`` needed); gold
    has no other half.
    """
    check_regime(regime)
    size = len(gold_half)
    if regime in NEEDS_RUN:
        if pool is None:
            raise ValueError(f"regime {regime!r} needs the pool of reached states")
        salt_epoch = 0 if regime == "static" else epoch
        return sample_states(pool, size, epoch_rng(seed, salt_epoch, 1))
    if regime.startswith("synthetic"):
        if golds is None or wrong_pool is None:
            raise ValueError(f"regime {regime!r} needs golds and wrong_pool")
        salt_epoch = epoch if regime == "synthetic-resampled" else 0
        return synthetic_states(golds, gold_half, wrong_pool, size,
                                epoch_rng(seed, salt_epoch, 2))
    return []


def wrong_passages(question_tops: Sequence[Sequence[int]], golds: Sequence[Sequence[int]],
                   depth: int) -> list[list[int]]:
    """Synthetic wrong-passage candidates per question: its frozen top rows (question
    alone), gold removed, at most ``depth``."""
    out = []
    for top, gold in zip(question_tops, golds):
        banned = set(gold)
        out.append([r for r in top if r not in banned][:depth])
    return out


def frozen_key(state: ChainState, shared_negatives: bool) -> ChainState:
    """The state whose text queries the frozen encoder for ``state``'s negatives: the
    question alone with the shared pool (one pool per question), else the state itself."""
    return (state[0], ()) if shared_negatives else state


def states_digest(states: Sequence[ChainState]) -> str:
    """Short fingerprint of a set of states (order-free): 12 hex chars of sha1."""
    rows = sorted((int(qi), [int(r) for r in hist]) for qi, hist in states)
    return hashlib.sha1(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:12]


def positives(states: Sequence[ChainState], golds: Sequence[Sequence[int]]) -> np.ndarray:
    """Earliest missing gold row of each state (every training state misses one)."""
    out = np.empty(len(states), dtype=np.int64)
    for i, (qi, hist) in enumerate(states):
        miss = missing_gold(hist, golds[qi])
        if not miss:
            raise ValueError(f"state {i} holds every gold passage; it has no positive")
        out[i] = miss[0]
    return out


def negatives(states: Sequence[ChainState], golds: Sequence[Sequence[int]],
              frozen_top: Sequence[Sequence[int]], n_neg: int) -> np.ndarray:
    """(n, n_neg) negative rows by the fixed rule; -1 pads where too few remain.

    ``frozen_top[i]`` is the frozen encoder's ranked rows for state i (state text, or the
    question alone for a shared pool).
    """
    out = np.full((len(states), n_neg), -1, dtype=np.int64)
    for i, (qi, hist) in enumerate(states):
        banned = set(golds[qi]) | set(hist)
        keep = [int(r) for r in frozen_top[i] if int(r) >= 0 and int(r) not in banned][:n_neg]
        out[i, :len(keep)] = keep
    return out


def info_nce(q: object, passage_vecs: object, pos: object, neg: object, tau: float) -> object:
    """InfoNCE over {a*} ∪ negatives (torch): mean of -log softmax at the positive.

    q (b, d) query vectors, passage_vecs (N, d) frozen unit passage vectors, pos (b,)
    rows, neg (b, m) rows with -1 padding (masked out).
    """
    import torch

    assert isinstance(q, torch.Tensor) and isinstance(passage_vecs, torch.Tensor)
    assert isinstance(pos, torch.Tensor) and isinstance(neg, torch.Tensor)
    rows = torch.cat([pos[:, None], neg.clamp_min(0)], dim=1)          # (b, 1 + m)
    cand = passage_vecs[rows]                                          # (b, 1 + m, d)
    logits = torch.einsum("bd,bmd->bm", q, cand) / tau
    mask = torch.cat([torch.zeros_like(pos[:, None], dtype=torch.bool), neg < 0], dim=1)
    logits = logits.masked_fill(mask, float("-inf"))
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


__all__ = ["NEEDS_RUN", "REGIMES", "check_regime", "epoch_rng", "frozen_key",
           "info_nce", "negatives", "other_half", "positives", "run_source", "sample_states",
           "states_digest", "synthetic_states", "wrong_passages"]
