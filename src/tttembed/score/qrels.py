"""``qrels:PATH``: human judgments as rewards (they stand for paid human judges).

PATH is a qrels TSV (``query-id<TAB>corpus-id<TAB>score``, header optional, extra columns
ignored) or a BEIR task folder, whose ``qrels/<split>.tsv`` is read (``split`` option,
default ``"test"``). The reward of a pair is ``grade / top`` where ``top`` is the top grade
in the file (the task's top grade); negative grades and unjudged pairs (including every
pair of a query with no judgments at all) get 0. Pairs are keyed by ``Item.id`` of the
query and the document; texts are not read. Mapping: ``"grade/{top}"``.

Judgments are labels: use this scorer only with queries whose judgments are never used to
evaluate it (held-out protocols).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.errors import ConfigError, DataError
from tttembed.score.base import Item


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def read_qrels_tsv(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {did: grade}}`` from a qrels TSV; errors name the file and line."""
    path = Path(path)
    try:
        data = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError("qrels file not found", path=path,
                        fix="give a qrels TSV or a BEIR folder with qrels/<split>.tsv") from None
    except UnicodeDecodeError:
        raise DataError("qrels file is not UTF-8 text", path=path,
                        fix="re-save it as UTF-8") from None
    qrels: dict[str, dict[str, float]] = {}
    first = True
    for number, line in enumerate(data.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 3:
            raise DataError(f"expected 3 tab-separated columns, found {len(cols)}", path=path,
                            line=number, fix="write query-id<TAB>corpus-id<TAB>score")
        qid, did, raw = cols[0].strip(), cols[1].strip(), cols[2].strip()
        grade = _number(raw)
        if grade is None:
            if first:  # a header line
                first = False
                continue
            raise DataError(f"score {raw!r} is not a number", path=path, line=number,
                            fix="the third column must be a numeric grade")
        first = False
        if not qid or not did:
            raise DataError("empty query-id or corpus-id", path=path, line=number,
                            fix="fill both id columns")
        seen = qrels.setdefault(qid, {})
        if did in seen and seen[did] != grade:
            raise DataError(f"pair ({qid}, {did}) judged twice with different grades "
                            f"({seen[did]:g} and {grade:g})", path=path, line=number,
                            fix="keep one judgment per pair")
        seen[did] = grade
    if not qrels:
        raise DataError("qrels file has no judgments", path=path,
                        fix="write query-id<TAB>corpus-id<TAB>score lines")
    return qrels


def qrels_file(path: str | Path, split: str = "test") -> Path:
    path = Path(path)
    if path.is_dir():
        return path / "qrels" / f"{split}.tsv"
    return path


class QrelsScorer:
    """Scorer: grade / top grade from human judgments, 0 when unjudged."""

    def __init__(self, rest: str, *, split: str = "test",
                 qrels: dict[str, dict[str, float]] | None = None) -> None:
        if qrels is None:
            if not rest:
                raise DataError("qrels: spec needs a path, e.g. 'qrels:data/scifact' or "
                                "'qrels:data/scifact/qrels/test.tsv'")
            if split != "test" and not Path(rest).is_dir():
                raise ConfigError(f"split={split!r} applies to a BEIR folder only; "
                                  "pass the folder, or the split's TSV without split=")
            self.path: Path | None = qrels_file(rest, split)
            qrels = read_qrels_tsv(self.path)
        else:
            self.path = None
        top = max((g for docs in qrels.values() for g in docs.values()), default=0.0)
        if top <= 0:
            raise DataError("no positive grade in the judgments", path=self.path,
                            fix="a qrels scorer needs at least one grade above 0")
        self.top = float(top)
        self.qrels = {q: {d: max(0.0, float(g)) / self.top for d, g in docs.items()}
                      for q, docs in qrels.items()}
        self.spec = f"qrels:{rest}"
        self.mapping = f"grade/{self.top:g}"
        is_dir = bool(rest) and Path(rest).is_dir()
        self.identity = self.spec + (f" split={split}" if is_dir and split != "test" else "")

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        judged = self.qrels.get(query.id, {})
        return np.array([judged.get(d.id, 0.0) for d in docs], dtype=np.float64)


def from_spec(rest: str, **options: Any) -> QrelsScorer:
    return QrelsScorer(rest, **options)
