"""``qrels:PATH``: human judgments as rewards (they stand for paid human judges).

PATH is a qrels TSV (``query-id<TAB>corpus-id<TAB>score``, integer grades, header
optional) or a BEIR task folder, whose ``qrels/<split>.tsv`` is read (``split`` option,
default ``"test"``); the file is read and checked by :func:`tttembed.data.beir.load_qrels`
(a pair judged twice is an error naming both lines). The reward of a pair is
``grade / top`` where ``top`` is the top grade in the file (the task's top grade);
negative grades and unjudged pairs (including every pair of a query with no judgments at
all) get 0. Pairs are keyed by ``Item.id`` of the query and the document; texts are not
read. Mapping: ``"grade/{top}"``.

Judgments are labels: use this scorer only with queries whose judgments are never used to
evaluate it (held-out protocols).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.errors import ConfigError, DataError
from tttembed.data.beir import load_qrels
from tttembed.score.base import Capabilities, Item, declare


def qrels_file(path: str | Path, split: str = "test") -> Path:
    """The qrels TSV itself, or ``<folder>/qrels/<split>.tsv`` for a BEIR folder."""
    path = Path(path)
    if path.is_dir():
        return path / "qrels" / f"{split}.tsv"
    return path


class QrelsScorer:
    """Scorer: grade / top grade from human judgments, 0 when unjudged."""

    def __init__(self, rest: str, *, split: str = "test",
                 qrels: Mapping[str, Mapping[str, float]] | None = None) -> None:
        if qrels is None:
            if not rest:
                raise DataError("qrels: spec needs a path, e.g. 'qrels:data/scifact' or "
                                "'qrels:data/scifact/qrels/test.tsv'")
            if split != "test" and not Path(rest).is_dir():
                raise ConfigError(f"split={split!r} applies to a BEIR folder only; "
                                  "pass the folder, or the split's TSV without split=")
            self.path: Path | None = qrels_file(rest, split)
            qrels = load_qrels(self.path)
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
        self.identity = identity(self.spec, split=split if is_dir and split != "test" else None)

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        judged = self.qrels.get(query.id, {})
        return np.array([judged.get(d.id, 0.0) for d in docs], dtype=np.float64)


@declare(Capabilities(uses_labels=True, cacheable=False))
def from_spec(rest: str, **options: Any) -> QrelsScorer:
    return QrelsScorer(rest, **options)
