"""Neighbour transfer (METHOD.md Part 4): an unseen query close to rewarded queries of
its task borrows their query-wise vectors.

For a query ``x`` of task ``t`` with no exact text key: among the rewarded queries of
``t`` whose stored embedding ``x_i`` has ``cos(x, x_i) >= FLOOR``, the ``K_NEAREST``
nearest give ``v(x) = sum_i w_i v_i`` with ``w_i`` proportional to
``exp(cos(x, x_i) / TEMPERATURE)`` (summing to 1), and ``alpha = n / (n + 1)`` with
``n = sum_i w_i n_i``. A query with no such neighbour gets nothing from this part. The
lookup is one inner product of the request batch with the stored embeddings.

Fixed defaults (docs/method-notes.md; never tuned on evaluation labels): ``k = 5``,
floor 0.8, temperature 0.05. A state records the values it was made with in its
hyperparameters (``"neighbour"``), and applying it uses those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.adapt.parts import StateParts

#: Neighbours mixed per query.
K_NEAREST = 5
#: The similarity floor: rewarded queries less similar than this lend nothing.
FLOOR = 0.8
#: Softmax temperature of the cosine weights.
TEMPERATURE = 0.05


def neighbour_hyperparameters(k: int = K_NEAREST, floor: float = FLOOR,
                              temperature: float = TEMPERATURE) -> dict[str, Any]:
    """The transfer's settings, recorded in the state's hyperparameters."""
    return {"k": int(k), "floor": float(floor), "temperature": float(temperature)}


def neighbour_parts(x: np.ndarray, base: StateParts | None = None) -> StateParts:
    """Parts whose neighbour rows are ``0..len(x)-1`` with embeddings ``x`` (float16),
    keeping ``base``'s adapter maps."""
    b = base or StateParts()
    return StateParts(b.adapter_rows, b.u, b.v, np.arange(len(x), dtype=np.int64),
                      np.asarray(x, np.float16))


def key_tasks(keys: Sequence[str | None]) -> np.ndarray:
    """The task of each query key (``task/#digest``; "" for None)."""
    return np.array([k.split("/", 1)[0] if k else "" for k in keys], dtype=str)


def transfer(x: np.ndarray, tasks: np.ndarray, keys: Sequence[str], vectors: np.ndarray,
             n_g: np.ndarray, parts: StateParts, settings: Mapping[str, Any] | None = None,
             alpha: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour deltas ``alpha v(x)`` (n, d) and which of the ``n`` queries got one.

    ``x`` (n, d) unit query vectors, ``tasks`` (n,) their tasks; ``keys``, ``vectors``,
    ``n_g`` the state's; ``settings`` its ``"neighbour"`` hyperparameters; ``alpha`` a
    fixed alpha (the one ``--alpha`` chose), None for the rule ``n / (n + 1)``."""
    mix, evidence, hit = neighbours(x, tasks, keys, vectors, n_g, parts, settings)
    a = evidence / (evidence + 1.0) if alpha is None else np.where(hit, float(alpha), 0.0)
    return (a[:, None] * mix).astype(np.float32), hit


def neighbours(x: np.ndarray, tasks: np.ndarray, keys: Sequence[str], vectors: np.ndarray,
               n_g: np.ndarray, parts: StateParts, settings: Mapping[str, Any] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(v(x) (n, d), n = sum_i w_i n_i (n,), hit (n,))``: the mix of the neighbours'
    vectors, its evidence, and which queries have a neighbour (zeros where not)."""
    cfg = {**neighbour_hyperparameters(), **(settings or {})}
    n = len(x)
    mix = np.zeros((n, vectors.shape[1]), np.float32)
    evidence = np.zeros(n)
    rows = parts.neighbour_rows
    if not n or not len(rows):
        return mix, evidence, np.zeros(n, bool)
    emb = parts.neighbour_x.astype(np.float32)
    sims = np.asarray(x, np.float32) @ emb.T                      # (n, M): the one product
    own = key_tasks([keys[r] for r in rows.tolist()])
    sims[(np.asarray(tasks)[:, None] != own[None, :]) | (sims < float(cfg["floor"]))] = -np.inf
    k = min(int(cfg["k"]), len(rows))
    top = (np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < len(rows)
           else np.broadcast_to(np.arange(len(rows)), (n, len(rows))))
    s = np.take_along_axis(sims, top, axis=1)
    ok = np.isfinite(s)
    hit = ok.any(axis=1)
    if not hit.any():
        return mix, evidence, hit
    s = np.where(ok, s, 0.0)
    best = np.where(hit, np.max(np.where(ok, s, -np.inf), axis=1), 0.0)[:, None]
    w = np.where(ok, np.exp((s - best) / float(cfg["temperature"])), 0.0)
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-30)
    g = rows[top]                                                 # (n, k) state rows
    mix = np.einsum("nk,nkd->nd", w, vectors[g]).astype(np.float32)
    evidence = (w * n_g[g]).sum(axis=1)
    return mix, evidence, hit


__all__ = ["FLOOR", "K_NEAREST", "TEMPERATURE", "key_tasks", "neighbour_hyperparameters",
           "neighbour_parts", "neighbours", "transfer"]
