"""Which torch device a model runs on: one rule for every torch-backed role.

``device=None`` (the default everywhere) means: the ``TTTEMBED_DEVICE`` environment
variable when set (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else ``cuda`` when torch sees a
GPU, else ``cpu``. An explicit device string is used as given.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

ENV = "TTTEMBED_DEVICE"


def pick_device(device: str | None = None) -> str:
    """The device to use for ``device`` (None: environment, then GPU when present)."""
    if device:
        return device
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_threads(limit: int = 8) -> int:
    """Worker threads for CPU-bound numpy work: the CPUs this process may use, at most
    ``limit``."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        n = os.cpu_count() or 1
    return max(1, min(limit, n))


def one_blas_thread() -> Any:
    """A context with one BLAS thread: for memory-bound passes over small pieces, extra
    BLAS threads only add synchronisation, which collapses when the cores are shared."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


__all__ = ["ENV", "cpu_threads", "one_blas_thread", "pick_device"]
