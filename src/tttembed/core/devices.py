"""Which torch device a model runs on: one rule for every torch-backed role.

``device=None`` (the default everywhere) means: the ``TTTEMBED_DEVICE`` environment
variable when set (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else ``cuda`` when torch sees a
GPU, else ``cpu``. An explicit device string is used as given.
"""

from __future__ import annotations

import os

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


__all__ = ["ENV", "pick_device"]
