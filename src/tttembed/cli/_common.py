"""What every command shares: error mapping (the messages themselves in
:mod:`tttembed.cli._errors`), JSON output, progress bars, the console, the legend.

Light on purpose: importing this module must not import torch or transformers.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table

from tttembed.api import HttpLimits
from tttembed.cli._errors import describe, summarised_warnings
from tttembed.core.progress import Progress

F = TypeVar("F", bound=Callable[..., Any])

#: Width of tables when stdout is not a terminal (a log, CI, ``| tee``): wide enough that
#: no cell is ever cut (rich would otherwise assume 80 columns and truncate with "…").
PIPE_WIDTH = 1000


def _width(stream: Any) -> int | None:
    """None (rich measures the terminal) on a terminal, else :data:`PIPE_WIDTH`."""
    try:
        return None if stream.isatty() else PIPE_WIDTH
    except (AttributeError, ValueError):
        return PIPE_WIDTH


console = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False)

#: Printed under every metrics table (one scale everywhere: 0-1, 4 decimals, as trec_eval);
#: a table with more columns adds what they mean (eval: b and alpha).
def legend(metrics: Sequence[str]) -> str:
    """The legend of a table of ``metrics``: what they are, and on what scale."""
    return f"legend: {', '.join(metrics)} = trec_eval means over judged queries (0-1)"


LEGEND = legend(("nDCG@10", "recall@100", "MRR@10"))


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def handle_errors(func: F) -> F:
    """Map every error a user can cause (ours, OSError, corrupt SQLite/JSON/FAISS/safetensors
    files, refused pickles, truncated files) to one line on stderr with the path and a fix:
    exit 1, no traceback. Ctrl-C exits 130; a closed stdout (``| head``) ends quietly, exit
    141 as Unix tools do. With ``--json`` (``as_json``), stdout holds exactly one JSON
    document, the command's or ``{"error": ...}`` (:func:`json_stdout`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with json_stdout(bool(kwargs.get("as_json"))) as doc:
            try:
                with summarised_warnings():
                    return func(*args, **kwargs)
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                doc.error("interrupted")
                raise typer.Exit(130) from None
            except typer.Exit as exc:
                if exc.exit_code:
                    doc.error(f"exit status {exc.exit_code} (the message is on stderr)")
                raise
            except Exception as exc:
                if is_usage_error(exc):  # typer.BadParameter & co: click prints them
                    usage: Any = exc
                    doc.error(str(usage.format_message()))
                    raise
                if closed_pipe(exc):
                    raise quiet_pipe_exit() from None
                message = describe(exc)
                if message is None:
                    raise
                doc.error(message)
                raise _fail(message, 1) from None

    return cast(F, wrapper)


def is_usage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of click's own (a usage error, a bad parameter): typer
    ships its own copy of click, so it is told by its interface."""
    return callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code")


def closed_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a closed pipe (``tttembed ... | head -2``)."""
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def quiet_pipe_exit() -> typer.Exit:
    """End quietly after the reader of stdout went away: stdout points at /dev/null (so
    that Python's flush at exit cannot fail again), exit status 141 (128 + SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return typer.Exit(141)


class _JsonDocument:
    """The one JSON document of a ``--json`` run: written to the stdout saved at its start
    (while the command runs, ``sys.stdout`` is stderr, so no stray line reaches it); an
    error writes ``{"error": ...}`` unless the command's document is already out."""

    def __init__(self, enabled: bool, out: Any) -> None:
        self.enabled, self.out, self.written = enabled, out, False

    def write(self, document: Mapping[str, Any]) -> None:
        self.written = True
        _WRITTEN.append(True)
        self.out.write(json.dumps(_finite(document), indent=2, sort_keys=False) + "\n")
        self.out.flush()

    def error(self, message: str) -> None:
        if self.enabled and not self.written:
            self.write({"error": message})


_DOCUMENTS: list[_JsonDocument] = []
_WRITTEN: list[bool] = []  # one entry per JSON document written by this process


def json_written() -> int:
    """How many ``--json`` documents this process wrote (the root's usage errors add
    ``{"error": ...}`` only when the command wrote none)."""
    return len(_WRITTEN)


@contextmanager
def json_stdout(enabled: bool) -> Iterator[_JsonDocument]:
    """With ``--json``: ``sys.stdout`` is stderr while the command runs (prints, the
    console, libraries), and :func:`emit_json` writes to the real stdout."""
    doc = _JsonDocument(enabled, sys.stdout)
    if not enabled:
        yield doc
        return
    _DOCUMENTS.append(doc)
    before = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield doc
    finally:
        sys.stdout = before
        _DOCUMENTS.remove(doc)


def http_embedder_for_index(handle: Any, cache_dir: Any, timeout: float | None = None,
                   max_retries: int | None = None) -> Any:
    """The embedder an index was built with (``embedder_for_index``), given the index's
    dimension before the first call (every vector is checked against it before it is
    cached) and the HTTP options."""
    from tttembed.index.embedder import embedder_for_index

    options = HttpLimits(timeout, max_retries).options(handle.manifest["embedder_spec"])
    return embedder_for_index(handle, cache_dir=cache_dir, **options)


@contextmanager
def progress_group(enabled: bool = True) -> Iterator[Progress]:
    """One live rich display for a command's stages: a :class:`tttembed.core.progress.Progress`
    (``stage(name, total)`` adds a bar and returns its ``advance(n)``). When stderr is not
    a terminal (a log, CI), plain flushed lines instead (:func:`line_progress`)."""
    if not enabled:
        yield lambda name, total: (lambda n: None)
        return
    if not err_console.is_terminal:
        yield line_progress()
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


#: Seconds between two progress lines of one stage when stderr is not a terminal.
PROGRESS_INTERVAL_ENV = "TTTEMBED_PROGRESS_INTERVAL"


def line_progress(interval: float | None = None, stream: Any = None) -> Progress:
    """Progress for logs: each stage prints ``name: done/total (pct) rate/s, ETA`` at most
    every ``interval`` seconds ($TTTEMBED_PROGRESS_INTERVAL, default 5) and once when it
    completes, flushed, to stderr (as pip and uv do when not on a terminal)."""
    import time

    every = float(interval if interval is not None
                  else os.environ.get(PROGRESS_INTERVAL_ENV) or 5.0)

    def stage(name: str, total: int | None) -> Callable[[int], None]:
        start = time.monotonic()
        state = {"done": 0, "last": start}

        def advance(n: int) -> None:
            state["done"] += n
            now = time.monotonic()
            finished = total is not None and state["done"] >= total
            if now - state["last"] < every and not finished:
                return
            state["last"] = now
            print(_progress_line(name, int(state["done"]), total, now - start),
                  file=stream or sys.stderr, flush=True)

        return advance

    return stage


def _progress_line(name: str, done: int, total: int | None, elapsed: float) -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    if total is None:
        return f"{name}: {done:,} done, {rate:,.1f}/s, {elapsed:,.0f} s elapsed"
    pct = 100.0 * done / total if total else 100.0
    eta = (total - done) / rate if rate > 0 else float("nan")
    left = "done" if done >= total else (f"ETA {eta:,.0f} s" if eta == eta else "ETA ?")
    return (f"{name}: {done:,}/{total:,} ({pct:.0f}%), {rate:,.1f}/s, "
            f"{elapsed:,.0f} s elapsed, {left}")


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
    console.print(legend(metrics), style="dim")
    return out


def emit_json(document: Mapping[str, Any]) -> None:
    """The one JSON document of a ``--json`` run, on the real stdout (finite floats; NaN
    and infinities become null)."""
    if _DOCUMENTS:
        _DOCUMENTS[-1].write(document)
        return
    sys.stdout.write(json.dumps(_finite(document), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither)."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@contextmanager
def json_mode(enabled: bool) -> Iterator[None]:
    """With ``--json``, everything the console prints goes to stderr, so that stdout holds
    only the JSON document (:func:`emit_json`)."""
    if not enabled:
        yield
        return
    before = getattr(console, "_file", None)  # None: follow sys.stdout (as CliRunner swaps it)
    console.file = sys.stderr
    try:
        yield
    finally:
        console.file = before  # type: ignore[assignment]


def timing_table(timings: Mapping[str, float], title: str = "timings") -> None:
    table = Table(title=title)
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for k, v in timings.items():
        table.add_row(k, f"{v:.3f}")
    console.print(table)
