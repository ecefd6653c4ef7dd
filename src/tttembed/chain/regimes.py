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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tttembed.chain.states import missing_gold

REGIMES = ("gold", "synthetic", "synthetic-resampled", "static", "resampled", "on-policy")
NEEDS_RUN = ("static", "resampled", "on-policy")

State = tuple[int, tuple[int, ...]]


def epoch_rng(seed: int, epoch: int, salt: int = 0) -> np.random.Generator:
    """Every random draw is a function of (seed, epoch): resume replays it exactly."""
    return np.random.default_rng([int(seed), int(epoch), int(salt)])


def sample_states(pool: Sequence[State], size: int, rng: np.random.Generator) -> list[State]:
    """Uniform sample without replacement (all of the pool when it is smaller), pool order."""
    if len(pool) <= size:
        return list(pool)
    idx = np.sort(rng.choice(len(pool), size=size, replace=False))
    return [pool[i] for i in idx]


def synthetic_states(golds: Sequence[Sequence[int]], gold_half: Sequence[State],
                     wrong_pool: Sequence[Sequence[int]], size: int,
                     rng: np.random.Generator) -> list[State]:
    """Gold histories with one wrong passage inserted at a random position.

    ``wrong_pool[qi]`` lists candidate wrong rows for question qi (its frozen top passages,
    gold removed). Gold states are drawn uniformly (with replacement only when
    ``size`` exceeds their number); duplicates are dropped.
    """
    usable = [s for s in gold_half if len(wrong_pool[s[0]])]
    if not usable:
        return []
    picks = rng.choice(len(usable), size=size, replace=size > len(usable))
    out: list[State] = []
    seen: set[State] = set()
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


def positives(states: Sequence[State], golds: Sequence[Sequence[int]]) -> np.ndarray:
    """Earliest missing gold row of each state (every training state misses one)."""
    out = np.empty(len(states), dtype=np.int64)
    for i, (qi, hist) in enumerate(states):
        miss = missing_gold(hist, golds[qi])
        if not miss:
            raise ValueError(f"state {i} holds every gold passage; it has no positive")
        out[i] = miss[0]
    return out


def negatives(states: Sequence[State], golds: Sequence[Sequence[int]],
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


__all__ = ["NEEDS_RUN", "REGIMES", "epoch_rng", "info_nce", "negatives", "positives",
           "sample_states", "synthetic_states"]
