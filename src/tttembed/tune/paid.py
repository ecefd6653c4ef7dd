"""A judge that answers only what the ledger already paid for.

``LedgerScorer(PaidOnly(judge), ledger)`` serves every pair the ledger holds under
``judge``'s key and answers every other pair as missing (nan), without asking anyone: a
learn run through it learns from exactly the pairs already paid, e.g. states learned again
on a re-indexed corpus after a fine-tune (``benchmarks/bench_finetune.py``). Give it a copy
of the ledger (:func:`ledger_copy`): the missing answers are recorded as missing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from tttembed.score.base import Item, Scorer
from tttembed.score.ledger import scorer_key


class PaidOnly:
    """``judge``'s spec, mapping and ledger key; every score it is asked for is nan."""

    def __init__(self, judge: Scorer) -> None:
        self.spec = str(judge.spec)
        self.mapping = str(getattr(judge, "mapping", ""))
        self.identity = scorer_key(judge)

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        return np.full(len(docs), np.nan, dtype=np.float64)


def ledger_copy(source: Path, out: Path) -> Path:
    """A consistent copy of the ledger ``source`` at ``out`` (SQLite's backup: the pairs
    still in its write-ahead log included, which a file copy would miss)."""
    out.unlink(missing_ok=True)
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(out)) as dst:
        src.backup(dst)
    return out


__all__ = ["PaidOnly", "ledger_copy"]
