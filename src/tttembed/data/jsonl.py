"""Shared line readers with file:line errors: UTF-8 lines, JSON-object lines, field checks.

Every error is a DataError carrying the path, the 1-based line and a fix hint, so that the
CLI can print one line that says where the problem is and what to do about it.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tttembed.core.errors import DataError

_MAX_SHOWN = 60


def shown(value: object) -> str:
    """A short one-line repr of a value for an error message."""
    text = repr(value)
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return text


#: Longest line a data file may hold, in bytes ($TTTEMBED_MAX_LINE_BYTES; default 64 MiB):
#: a file without line ends (``/dev/zero``, a binary file) is an error, never read whole.
MAX_LINE_ENV = "TTTEMBED_MAX_LINE_BYTES"
MAX_LINE_BYTES = 64 * 1024 * 1024


def max_line_bytes() -> int:
    """:data:`MAX_LINE_BYTES`, or $TTTEMBED_MAX_LINE_BYTES when set to a positive integer."""
    import os

    value = os.environ.get(MAX_LINE_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else MAX_LINE_BYTES


def read_lines(path: str | Path, *, missing_fix: str | None = None) -> list[tuple[int, str]]:
    """Non-blank lines of a UTF-8 text file as (1-based line number, line without newline).

    Lines are split on "\\n" only ("\\r\\n" endings are accepted; other Unicode line
    separators stay inside their line, as JSON allows them in strings). A UTF-8 byte-order
    mark at the start is ignored. Bad UTF-8 is an error naming the line; so is a line
    longer than :func:`max_line_bytes` (read no further).
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return _lines(fh, path)
    except FileNotFoundError:
        raise DataError("file not found", path=path,
                        fix=missing_fix or "check the path") from None
    except IsADirectoryError:
        raise DataError("expected a file, found a directory", path=path,
                        fix=missing_fix or "pass the file inside it") from None
    except OSError as exc:
        raise DataError(f"cannot read file: {exc.strerror}", path=path,
                        fix="check the path and its permissions") from None


def _lines(fh: Any, path: Path) -> list[tuple[int, str]]:
    limit = max_line_bytes()
    out: list[tuple[int, str]] = []
    number = 0
    while True:
        data = fh.readline(limit + 1)
        if not data:
            return out
        number += 1
        if len(data) > limit and not data.endswith(b"\n"):
            raise DataError(f"line longer than {limit:,} bytes (a file without line ends, "
                            "or not a text file?); read no further", path=path, line=number,
                            fix=f"give a JSON-lines/TSV text file, or raise ${MAX_LINE_ENV}")
        if number == 1:
            data = data.removeprefix(codecs.BOM_UTF8)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason})",
                            path=path, line=number,
                            fix="re-save the file as UTF-8") from None
        row = text.removesuffix("\n").removesuffix("\r")
        if row.strip():
            out.append((number, row))


def iter_objects(path: str | Path, *, missing_fix: str | None = None,
                 what: str = "records") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSON-lines file.

    Raises DataError for invalid JSON, a line that is not a JSON object, and a file with no
    records at all.
    """
    path = Path(path)
    lines = read_lines(path, missing_fix=missing_fix)
    if not lines:
        raise DataError(f"empty file: no {what}", path=path,
                        fix="write one JSON object per line")
    loads = json.loads
    for number, line in lines:
        try:
            obj = loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON: {exc.msg} at column {exc.colno}", path=path,
                            line=number, fix="write one complete JSON object per line") from None
        except RecursionError:
            raise DataError("invalid JSON: nested too deeply", path=path, line=number,
                            fix="write one flat JSON object per line") from None
        if type(obj) is not dict:
            raise DataError(f"expected a JSON object, got {_json_type(obj)}", path=path,
                            line=number, fix="write one JSON object {...} per line")
        yield number, obj


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def check_text(value: str, key: str, path: Path, line: int) -> str:
    """``value`` unless it holds a lone UTF-16 surrogate (a JSON escape such as
    ``"\\ud800"`` without its pair): no tokenizer or UTF-8 writer accepts one."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"{key!r} holds a lone surrogate {shown(value[exc.start])} at "
                        f"character {exc.start + 1} (not valid Unicode text)", path=path,
                        line=line, fix="remove the \\udXXX escape, or write the character "
                        "as a complete pair / plain UTF-8") from None
    return value


def _missing(key: str, path: Path, line: int) -> DataError:
    return DataError(f"missing required field {key!r}", path=path, line=line,
                     fix=f"add a {key!r} field to this record")


def get_id(obj: dict[str, Any], key: str, path: Path, line: int) -> str:
    """An id field: a non-empty string, or an integer (converted to str)."""
    try:
        value = obj[key]
    except KeyError:
        raise _missing(key, path, line) from None
    if type(value) is str:
        if not value.strip():
            raise DataError(f"empty {key!r}", path=path, line=line,
                            fix=f"give every record a non-empty {key!r}")
        return check_text(value, key, path, line)
    if type(value) is int:  # not bool
        return str(value)
    raise DataError(f"{key!r} must be a string or an integer, got {_json_type(value)}",
                    path=path, line=line, fix=f"write the id as a string, e.g. \"{key}\": \"d1\"")


def get_str(obj: dict[str, Any], key: str, path: Path, line: int, *,
            required: bool = True, nonempty: bool = False) -> str:
    """A string field; missing optional fields read as ""."""
    try:
        value = obj[key]
    except KeyError:
        if required:
            raise _missing(key, path, line) from None
        return ""
    if type(value) is not str:
        raise DataError(f"{key!r} must be a string, got {_json_type(value)}", path=path,
                        line=line, fix=f"write {key!r} as a JSON string")
    if nonempty and not value.strip():
        raise DataError(f"empty {key!r}", path=path, line=line,
                        fix=f"give this record a non-empty {key!r} or remove the line")
    return check_text(value, key, path, line)


def get_id_list(obj: dict[str, Any], key: str, path: Path, line: int, *,
                required: bool = True, nonempty: bool = False) -> tuple[str, ...]:
    """A list of ids (strings or integers); duplicates inside the list are an error."""
    try:
        value = obj[key]
    except KeyError:
        if required:
            raise _missing(key, path, line) from None
        return ()
    if type(value) is not list:
        raise DataError(f"{key!r} must be a list of ids, got {_json_type(value)}", path=path,
                        line=line, fix=f"write {key!r} as a JSON array of id strings")
    if nonempty and not value:
        raise DataError(f"empty {key!r}", path=path, line=line,
                        fix=f"give {key!r} at least one id or remove the line")
    out: list[str] = []
    seen: set[str] = set()
    for position, item in enumerate(value, start=1):
        if type(item) is str and item.strip():
            ident = check_text(item, key, path, line)
        elif type(item) is int:
            ident = str(item)
        else:
            raise DataError(f"{key!r} item {position} must be a non-empty id string, got "
                            f"{shown(item)}", path=path, line=line,
                            fix=f"write {key!r} as a JSON array of id strings")
        if ident in seen:
            raise DataError(f"{key!r} lists id {shown(ident)} twice", path=path, line=line,
                            fix="list each id once")
        seen.add(ident)
        out.append(ident)
    return tuple(out)


def duplicate(kind: str, ident: str, first: int, path: Path, line: int) -> DataError:
    """The error for an id seen twice, naming the line of its first occurrence."""
    return DataError(f"duplicate {kind} {shown(ident)} (first on line {first})", path=path,
                     line=line, fix="give every record a unique id or remove the duplicate")
