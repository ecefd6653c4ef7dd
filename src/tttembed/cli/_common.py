"""What every command shares: error mapping, progress bars, the console, the legend.

Light on purpose: importing this module must not import torch or transformers.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tttembed.api import Progress, TTTEmbedError

F = TypeVar("F", bound=Callable[..., Any])

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False)

#: Printed under every metrics table (one scale everywhere: 0-1, 4 decimals, as trec_eval).
LEGEND = ("legend: nDCG@10, recall@100, MRR@10 = trec_eval means over judged queries "
          "(0-1); b = rewards per query; alpha = n/(n+1), n = rewarded queries behind a "
          "vector")


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def handle_errors(func: F) -> F:
    """Map every error a user can cause to one line on stderr: exit 1 (no traceback);
    Ctrl-C exits 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TTTEmbedError as exc:
            raise _fail(str(exc), 1) from None
        except OSError as exc:
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            raise _fail(f"{where}{exc.strerror or exc} (check the path and its "
                        "permissions)", 1) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_group(enabled: bool = True) -> Iterator[Progress]:
    """One live rich display for a command's stages: a :class:`tttembed.core.progress.Progress`
    (``stage(name, total)`` adds a bar and returns its ``advance(n)``). Quiet when stderr
    is not a terminal."""
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


def split_list(values: Sequence[str] | None) -> tuple[str, ...]:
    """Comma-separated and/or repeated values, in order."""
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(out)


def quiet_libraries() -> None:
    """Silence third-party progress bars, info logs and warnings (ours are the bars users
    see; library warnings never print into them)."""
    import logging
    import os
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("sentence_transformers", "transformers", "faiss", "httpx", "peft"):
        logging.getLogger(name).setLevel(logging.ERROR)


def print_metrics(results: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]],
                  title: str = "", metrics: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")
                  ) -> dict[str, dict[str, float]]:
    """One row per name: metric means (0-1, 4 decimals) over the judged queries, then the
    legend."""
    from tttembed import api

    table = Table(title=title or None)
    table.add_column("run")
    table.add_column("queries", justify="right")
    for m in metrics:
        table.add_column(m, justify="right")
    out = {}
    for name, (qrels, run) in results.items():
        scores = api.run_metrics(qrels, run, metrics)
        out[name] = scores
        judged = sum(1 for g in qrels.values() if any(v >= 1 for v in g.values()))
        table.add_row(name, str(judged), *(f"{scores[m]:.4f}" for m in metrics))
    console.print(table)
    console.print(LEGEND, style="dim")
    return out


def timing_table(timings: Mapping[str, float], title: str = "timings") -> None:
    table = Table(title=title)
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for k, v in timings.items():
        table.add_row(k, f"{v:.3f}")
    console.print(table)
