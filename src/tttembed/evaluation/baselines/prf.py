"""Vector-side baselines for the evaluation (pure numpy: arrays in, arrays out).

Both move the query vector and search the same index again, like TTT-Embed does, so the
comparison isolates *how* the vector is moved.

* **Average / Rocchio pseudo-relevance feedback** (label-free, as pyserini offers for
  dense retrieval, ``DenseVectorAveragePrf`` / ``DenseVectorRocchioPrf``):
  average PRF ``x' = unit(mean(x, z_1 .. z_k))`` over the top-``k`` base neighbours;
  Rocchio PRF ``x' = unit(a x + b mean(z_1 .. z_k))``. Fixed settings (k = 3 for the
  average; a = 1, b = 0.5, k = 3 for Rocchio), never tuned on evaluation labels.
* **Reward-weighted Rocchio** (uses the same rewarded pairs as every other method):
  ``x' = unit(x + beta * sum_i r_i z_i / sum_i r_i - gamma * sum_i (1 - r_i) z_i /
  sum_i (1 - r_i))`` with SMART's ``beta = 0.75``, ``gamma = 0.15``; a term whose weights
  sum to 0 is dropped. Queries without rewards keep their vector.
"""

from __future__ import annotations

import numpy as np

from tttembed.adapt.feedback import RW_BETA, RW_GAMMA, reward_rocchio, unit_rows
from tttembed.core.errors import DataError

PRF_DEPTH = 3
ROCCHIO_A = 1.0
ROCCHIO_B = 0.5

__all__ = ["RW_BETA", "RW_GAMMA", "average_prf", "reward_rocchio", "rocchio_prf", "unit_rows"]


def _neighbours(x: np.ndarray, z: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float32)
    z = np.asarray(z, dtype=np.float32)
    if x.ndim != 2 or z.ndim != 3 or z.shape[0] != x.shape[0] or z.shape[2] != x.shape[1]:
        raise DataError(f"PRF needs x (n, d) and neighbour vectors (n, K, d); got {x.shape} "
                        f"and {z.shape}")
    if k < 1 or k > z.shape[1]:
        raise DataError(f"PRF depth {k} must lie in 1..{z.shape[1]} (neighbours retrieved)")
    return x, z[:, :k]


def average_prf(x: np.ndarray, neighbours: np.ndarray, k: int = PRF_DEPTH) -> np.ndarray:
    """``unit(mean(x_q, z_1, ..., z_k))`` per query; ``neighbours`` (n, K, d) in base order."""
    x, z = _neighbours(x, neighbours, k)
    return unit_rows((x + z.sum(axis=1)) / (k + 1))


def rocchio_prf(x: np.ndarray, neighbours: np.ndarray, k: int = PRF_DEPTH,
                a: float = ROCCHIO_A, b: float = ROCCHIO_B) -> np.ndarray:
    """``unit(a x_q + b mean(z_1..z_k))`` per query."""
    x, z = _neighbours(x, neighbours, k)
    return unit_rows(a * x + b * z.mean(axis=1))
