"""What a state holds beyond its additive vectors (METHOD.md Part 4, "States for unseen
questions"): a low-rank query-side map per adapter group, and the embeddings of the
rewarded queries whose vectors neighbour transfer lends to unseen queries.

npz members (written only when non-empty, so older files and readers are unchanged):
``adapter_rows`` (A,) int64 rows of the state's keys that carry a map, ``U`` and ``V``
(A, d, r) float32 (the map is ``U V^T``, applied as ``unit(x + alpha (v + U V^T x))``);
``neighbour_rows`` (M,) int64 rows of query keys and ``neighbour_x`` (M, d) float16,
the unit embeddings of those rewarded query texts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.core.errors import DataError

#: The npz members of the parts.
MEMBERS = ("adapter_rows", "U", "V", "neighbour_rows", "neighbour_x")


def _ints() -> np.ndarray:
    return np.zeros(0, np.int64)


def _maps() -> np.ndarray:
    return np.zeros((0, 0, 0), np.float32)


@dataclass(frozen=True, eq=False)
class StateParts:
    """Low-rank maps (``u``, ``v``: (A, d, r)) of rows ``adapter_rows`` and neighbour
    embeddings ``neighbour_x`` (M, d) of rows ``neighbour_rows``; empty by default."""

    adapter_rows: np.ndarray = field(default_factory=_ints)
    u: np.ndarray = field(default_factory=_maps)
    v: np.ndarray = field(default_factory=_maps)
    neighbour_rows: np.ndarray = field(default_factory=_ints)
    neighbour_x: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float16))

    @property
    def rank(self) -> int:
        """The maps' rank (0 without maps)."""
        return int(self.u.shape[2]) if len(self.adapter_rows) else 0

    @property
    def empty(self) -> bool:
        return not len(self.adapter_rows) and not len(self.neighbour_rows)

    def checked(self, groups: int, dim: int) -> StateParts:
        """The parts as contiguous arrays of the right dtypes, or a DataError naming what
        disagrees with a state of ``groups`` keys and dimension ``dim``."""
        rows = np.asarray(self.adapter_rows, np.int64).reshape(-1)
        a = len(rows)
        u = np.ascontiguousarray(self.u, np.float32)
        v = np.ascontiguousarray(self.v, np.float32)
        if not a:
            u = v = np.zeros((0, dim, 0), np.float32)
        if u.ndim != 3 or u.shape != v.shape or u.shape[:2] != (a, dim):
            raise DataError(f"adapter maps disagree: {a} rows, U {u.shape}, V {v.shape}, "
                            f"dim {dim}")
        nrows = np.asarray(self.neighbour_rows, np.int64).reshape(-1)
        nx = np.ascontiguousarray(self.neighbour_x, np.float16)
        if not len(nrows):
            nx = np.zeros((0, dim), np.float16)
        if nx.shape != (len(nrows), dim):
            raise DataError(f"neighbour embeddings have shape {nx.shape}, expected "
                            f"({len(nrows)}, {dim})")
        for name, r in (("adapter_rows", rows), ("neighbour_rows", nrows)):
            if len(r) and (r.min() < 0 or r.max() >= groups or len(set(r.tolist())) != len(r)):
                raise DataError(f"{name} must be distinct rows of the {groups} keys")
        if not (np.isfinite(u).all() and np.isfinite(v).all() and np.isfinite(nx).all()):
            raise DataError("adapter maps or neighbour embeddings are not finite")
        return StateParts(rows, u, v, nrows, nx)

    def arrays(self) -> dict[str, np.ndarray]:
        """The npz members (none when empty)."""
        out: dict[str, np.ndarray] = {}
        if len(self.adapter_rows):
            out.update(adapter_rows=self.adapter_rows, U=self.u, V=self.v)
        if len(self.neighbour_rows):
            out.update(neighbour_rows=self.neighbour_rows, neighbour_x=self.neighbour_x)
        return out

    def describe(self) -> dict[str, Any]:
        """For the manifest: how many maps (and their rank) and neighbour embeddings."""
        return {"adapters": len(self.adapter_rows), "rank": self.rank,
                "neighbours": len(self.neighbour_rows)}


def read_parts(data: Mapping[str, Any]) -> StateParts:
    """The parts of an opened npz (``np.load``), empty where its members are absent."""
    files = set(getattr(data, "files", data))
    got = {m: np.array(data[m]) for m in MEMBERS if m in files}
    for m, kinds in (("adapter_rows", "iu"), ("neighbour_rows", "iu"), ("U", "f"), ("V", "f"),
                     ("neighbour_x", "f")):
        if m in got and got[m].dtype.kind not in kinds:
            raise DataError(f"{m} has dtype {got[m].dtype}, not a numeric array")
    if ("adapter_rows" in got) != ("U" in got and "V" in got):
        raise DataError("the file has adapter_rows without U and V, or the reverse")
    if ("neighbour_rows" in got) != ("neighbour_x" in got):
        raise DataError("the file has neighbour_rows without neighbour_x, or the reverse")
    return StateParts(got.get("adapter_rows", _ints()), got.get("U", _maps()),
                      got.get("V", _maps()), got.get("neighbour_rows", _ints()),
                      got.get("neighbour_x", np.zeros((0, 0), np.float16)))


__all__ = ["MEMBERS", "StateParts", "read_parts"]
