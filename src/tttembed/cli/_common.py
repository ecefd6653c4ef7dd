"""What every command shares: error mapping, progress bars, the console.

Light on purpose: importing this module must not import torch or transformers.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console

from tttembed.core.errors import TTTEmbedError

F = TypeVar("F", bound=Callable[..., Any])

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False)


def handle_errors(func: F) -> F:
    """Map project errors to one line on stderr and exit code 1 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TTTEmbedError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True, markup=True,
                              emoji=False) if sys.stderr.isatty() else print(
                f"error: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_group(enabled: bool = True
                   ) -> Iterator[Callable[[str, int | None], Callable[[int], None]]]:
    """One live rich display for a command's stages; yields ``stage(name, total)`` which
    adds a bar and returns its ``advance(n)``. Quiet when stderr is not a terminal."""
    if not enabled or not err_console.is_terminal:
        yield lambda name, total: (lambda n: None)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err_console,
                  transient=False) as prog:
        def stage(name: str, total: int | None) -> Callable[[int], None]:
            task = prog.add_task(name, total=total)
            return lambda n: prog.advance(task, n)

        yield stage


@contextmanager
def progress_bar(description: str, total: int | None, enabled: bool = True
                 ) -> Iterator[Callable[[int], None]]:
    """A single rich progress bar; yields ``advance(n)``."""
    with progress_group(enabled) as stage:
        yield stage(description, total)


def parse_params(values: list[str] | None) -> dict[str, int]:
    """``key=value`` pairs (integers) from repeated ``--param`` options."""
    out: dict[str, int] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--param")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise typer.BadParameter(f"{key} must be an integer, got {value!r}",
                                     param_hint="--param") from None
    return out


def quiet_libraries() -> None:
    """Silence third-party progress bars and info logs (ours are the ones users see)."""
    import logging
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in ("sentence_transformers", "transformers", "faiss", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
