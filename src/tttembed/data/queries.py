"""Plain query files for `tttembed search`: .jsonl, .tsv or .txt, chosen by the suffix.

- ``.jsonl``: one ``{"_id", "text"}`` per line (the BEIR queries format).
- ``.tsv``: ``id<TAB>text`` per line; an optional first line naming the columns
  (``query-id``/``query_id``/``qid``/``id``/``_id``, then ``text``/``query``/``question``)
  is a header.
- ``.txt``: one query per line; its id is ``q<line number>`` (q1, q2, ...); blank lines
  are skipped, so ids stay tied to the line a query is on.
"""

from __future__ import annotations

from pathlib import Path

from tttembed.core.errors import DataError
from tttembed.data.beir import load_beir_queries
from tttembed.data.jsonl import duplicate, read_lines, shown

SUFFIXES = (".jsonl", ".tsv", ".txt")
#: A first line ``ID_NAME<TAB>TEXT_NAME`` (any case) is a header, not a query.
_TSV_ID_NAMES = frozenset({"query-id", "query_id", "queryid", "qid", "id", "_id"})
_TSV_TEXT_NAMES = frozenset({"text", "query", "question", "query-text", "query_text"})


def load_queries(path: str | Path) -> dict[str, str]:
    """{query_id: text} from a .jsonl, .tsv or .txt file, in file order."""
    path = Path(path)
    if not path.exists():
        raise DataError("query file not found (no file or folder at this path)", path=path,
                        fix="give an existing query file (.jsonl, .tsv, .txt) or BEIR folder")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return load_beir_queries(path)
    if suffix == ".tsv":
        return _load_tsv(path)
    if suffix == ".txt":
        return _load_txt(path)
    raise DataError(f"unknown query file type {path.suffix or '(no suffix)'!r}", path=path,
                    fix=f"use one of {', '.join(SUFFIXES)}")


def _missing_fix(path: Path) -> str:
    return f"expected a query file ({', '.join(SUFFIXES)}) at {path}"


def _load_tsv(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for index, (line, raw) in enumerate(read_lines(path, missing_fix=_missing_fix(path))):
        cols = raw.split("\t")
        if len(cols) != 2:
            raise DataError(f"expected 2 tab-separated columns (id, text), found {len(cols)}",
                            path=path, line=line,
                            fix="write id<TAB>text; for texts with tabs use a .jsonl file")
        qid, text = cols[0].strip(), cols[1].strip()
        if index == 0 and qid.lower() in _TSV_ID_NAMES and text.lower() in _TSV_TEXT_NAMES:
            continue
        if not qid:
            raise DataError("empty query id", path=path, line=line,
                            fix="write id<TAB>text with a non-empty id")
        if not text:
            raise DataError(f"empty text for query {shown(qid)}", path=path, line=line,
                            fix="write the query text or remove the line")
        if qid in lines:
            raise duplicate("query id", qid, lines[qid], path, line)
        lines[qid] = line
        queries[qid] = text
    if not queries:
        raise DataError("empty file: no queries", path=path, fix="write id<TAB>text lines")
    return queries


def _load_txt(path: Path) -> dict[str, str]:
    queries = {f"q{line}": raw.strip()
               for line, raw in read_lines(path, missing_fix=_missing_fix(path))}
    if not queries:
        raise DataError("empty file: no queries", path=path, fix="write one query per line")
    return queries
