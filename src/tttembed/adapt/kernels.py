"""Optional numba kernel: the Adam update of the optimizer fused into one loop.

:meth:`tttembed.adapt.optimize._Adam.update` takes about a dozen numpy passes over the
vectors, moments and gradient per step; for query-wise blocks that sit in cache these
passes, not memory, set the speed. :func:`adam_update` does the same float32 operations
in the same order per element, in one pass (no fast-math: no reassociation, no fused
multiply-add), so its results are bit-identical to the numpy update (tested). Only
elementwise work is fused: the dot products stay in numpy / BLAS, whose summation order
cannot be reproduced (a different order moves KD and GRPO vectors by up to ~1e-2 after
300 steps: the problem amplifies float rounding).

``numba`` is optional (``pip install tttembed[fast]``); :func:`adam_kernel` returns None
when it is missing or turned off (``TTTEMBED_NUMBA=0``), and numpy is used.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

_KERNEL: list[Any] = []


def _adam_update(v: Any, m: Any, s: Any, grad: Any, c: Any) -> None:
    """``c`` float32: 2 ridge, beta1, 1 - beta1, beta2, 1 - beta2, 1 / (bc2_sqrt step_size),
    eps / step_size; the numpy update's operations in its order."""
    for j in range(v.shape[0]):
        vj = v[j]
        g = grad[j] + vj * c[0]
        mj = m[j] * c[1] + g * c[2]
        sj = s[j] * c[3] + (g * g) * c[4]
        m[j] = mj
        s[j] = sj
        v[j] = vj - mj / (np.sqrt(sj) * c[5] + c[6])


def adam_kernel() -> Any:
    """The compiled :func:`_adam_update` (flat float32 arrays), or None without numba."""
    if not _KERNEL:
        fn = None
        if (os.environ.get("TTTEMBED_NUMBA", "1") != "0"
                and importlib.util.find_spec("numba") is not None):
            import numba

            fn = numba.njit(cache=True, nogil=True, error_model="numpy")(_adam_update)
        _KERNEL.append(fn)
    return _KERNEL[0]


def constants(ridge: float, betas: tuple[float, float], scale: float, eps_term: float
              ) -> np.ndarray:
    """The float32 constants of one step, each rounded as numpy rounds a Python float
    scalar against a float32 array."""
    return np.array([2.0 * ridge, betas[0], 1.0 - betas[0], betas[1], 1.0 - betas[1],
                     scale, eps_term], dtype=np.float32)
