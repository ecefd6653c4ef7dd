"""What a command tells its user when something goes wrong: the one-line message (the
path and a fix) for an exception a user can cause, and the warnings raised while it ran,
summarised once at its end. :func:`tttembed.cli._common.handle_errors` maps both onto
stderr and the exit status.

Light on purpose: importing this module must not import torch or transformers.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import sys
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tttembed.api import TTTEmbedError

#: local variable names that hold the file an I/O call was working on
_PATH_NAMES = ("path", "file", "filename", "fname", "fn", "folder", "src", "out", "target")
_RERUN = "re-create it by running the command that wrote it again with --overwrite"


def _path_of(exc: BaseException) -> str:
    """The file an exception was about: its ``filename``, else the innermost frame-local
    path (``path``, ``file`` ...) that exists on disk; "" when none is found."""
    name = getattr(exc, "filename", None)
    if name:
        return str(name)
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for key in _PATH_NAMES:
            value = frame.f_locals.get(key)
            if isinstance(value, (str, os.PathLike)) and str(value) and len(str(value)) < 4096:
                try:
                    if os.path.exists(value):
                        return str(value)
                except (OSError, ValueError):
                    continue
    return ""


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _os_error(exc: OSError) -> str:
    fixes = {errno.ENOSPC: "free disk space and run again; nothing half-written is kept",
             errno.EDQUOT: "free disk space (quota) and run again",
             errno.EACCES: "check the permissions of the path",
             errno.EPERM: "check the permissions of the path",
             errno.EROFS: "write to a writable file system",
             errno.ENOENT: "check the path"}
    where = _path_of(exc)
    fix = fixes.get(exc.errno or 0, "check the path and its permissions")
    return f"{where + ': ' if where else ''}{exc.strerror or _first_line(exc)} ({fix})"


def describe(exc: BaseException) -> str | None:
    """The one-line message for an exception a user can cause, or None (a bug)."""
    if isinstance(exc, TTTEmbedError):
        return str(exc)
    where = _path_of(exc)
    at = f" {where}" if where else ""
    kind = type(exc).__name__
    if isinstance(exc, sqlite3.DatabaseError):
        return (f"SQLite database{at} is unreadable: {_first_line(exc)} (a corrupt file: try "
                f"'sqlite3 {where or 'FILE'} .recover' into a new file, or move it aside)")
    if isinstance(exc, json.JSONDecodeError):
        return (f"corrupt JSON file{at}: {exc.msg} at line {exc.lineno} column {exc.colno} "
                f"(a truncated or edited file; {_RERUN})")
    if kind == "UnpicklingError":  # torch.load(weights_only=True) refusing a pickle
        return (f"refused to load{at}: it holds a pickle, which tttembed never executes "
                f"({_first_line(exc, 120)}; {_RERUN})")
    if kind == "SafetensorError":
        return f"cannot read checkpoint{at}: {_first_line(exc)} (truncated or corrupt; {_RERUN})"
    if isinstance(exc, (EOFError, zipfile.BadZipFile)):
        return f"truncated or empty file{at}: {_first_line(exc)} ({_RERUN})"
    if isinstance(exc, RuntimeError) and "faiss" in str(exc).lower():
        detail = " ".join(str(exc).split()).rpartition("Error: ")[2] or _first_line(exc)
        return (f"FAISS could not read or write{at}: {detail[:200]} (a truncated or corrupt "
                "index file; rebuild it with 'tttembed index DATA --out INDEX --overwrite')")
    if isinstance(exc, UnicodeDecodeError):
        return (f"{where or 'an input file'}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}"
                f" at offset {exc.start}: {exc.reason}) (save it as UTF-8)")
    if isinstance(exc, OSError):
        return _os_error(exc)
    return None


class _Notes(logging.Handler):
    """Collects the notes (:mod:`tttembed.core.notes`) of one command, in order."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def summarised_warnings() -> Iterator[None]:
    """Notes and warnings raised while a command runs, printed once at its end: each
    distinct note (the judge check's line, a rule that is off while queries find their
    own document) once; a judge's unscored answers (one JudgeWarning per pair) as one line
    with their count, the first example and the fix; any other warning once per distinct
    message. Never Python's raw ``file:line: Category: ...`` lines, one per pair."""
    from tttembed.core.notes import NOTES

    logger, notes = logging.getLogger(NOTES), _Notes()
    logger.addHandler(notes)
    propagate, logger.propagate = logger.propagate, False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            yield
        finally:
            logger.removeHandler(notes)
            logger.propagate = propagate
            for line in dict.fromkeys(notes.lines):
                print(line, file=sys.stderr)
            _print_warnings(caught)


def _print_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    judged = [w for w in caught if w.category.__name__ == "JudgeWarning"]
    if judged:
        first = str(judged[0].message)
        print(f"warning: {len(judged)} judge answer(s) held no valid score and are recorded "
              "as missing in the ledger (a rerun with --retry-missing asks for them again); "
              f"first: {first}", file=sys.stderr)
    for message in dict.fromkeys(str(w.message) for w in caught if w not in judged):
        print(f"warning: {message}", file=sys.stderr)


__all__ = ["describe", "summarised_warnings"]
