"""Fault injection: :func:`fault_point`, the named crash points of the artifact writes
(:mod:`tttembed.core.io`) and of the index and registry backends.
``TTTEMBED_FAULT=point[@name]`` makes the process SIGKILL itself at that named point (the
fault-injection tests use it; unset, it does nothing).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tttembed.types import PathLike

FAULT_ENV = "TTTEMBED_FAULT"


def fault_point(point: str, target: PathLike | None = None) -> None:
    """SIGKILL this process when ``$TTTEMBED_FAULT`` names ``point`` (``point`` alone, or
    ``point@NAME`` where NAME is the file name of ``target``; several comma-separated).
    Used by the fault-injection tests; a no-op when the variable is unset."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    for want in spec.split(","):
        name, _, on = want.strip().partition("@")
        if name == point and (not on or (target is not None and Path(target).name == on)):
            os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["FAULT_ENV", "fault_point"]
