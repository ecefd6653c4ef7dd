"""One progress protocol for every long step.

A :class:`Progress` is called once per stage with the stage's name and total (``None``
when unknown) and returns an :data:`Advance`, called with the units just finished. The CLI
passes one backed by ``rich`` bars; library code passes it down or uses :data:`SILENT`.
Library modules report anything else through ``logging`` (``logging.getLogger(__name__)``),
never ``print``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Advance = Callable[[int], None]


class Progress(Protocol):
    def __call__(self, name: str, total: int | None) -> Advance:
        """Start a stage; the result is advanced by the units finished."""
        ...


def _noop(n: int) -> None:
    return None


def silent(name: str, total: int | None) -> Advance:
    """A Progress that shows nothing."""
    return _noop


SILENT: Progress = silent


def stage(progress: Progress | None, name: str, total: int | None) -> Advance:
    """``progress(name, total)``, or a no-op advance when ``progress`` is None."""
    return _noop if progress is None else progress(name, total)


__all__ = ["SILENT", "Advance", "Progress", "silent", "stage"]
