"""What changes between two registry versions (``tttembed states diff``): per key the
norm of the applied offsets' difference, the cosine of the vectors, both alphas and the
adapter map's change; of two chain encoder versions, their records' fields. What cannot
be compared is said in words, never a number."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tttembed.adapt.state import AdaptState
from tttembed.registry.chain import is_chain


class _Diffed(Protocol):
    """What a diff reads of a :class:`tttembed.registry.base.Version`."""

    @property
    def name(self) -> str: ...

    @property
    def manifest(self) -> Mapping[str, Any]: ...

    @property
    def state_path(self) -> Path: ...

    def load(self) -> AdaptState: ...


def version_diff(va: _Diffed, vb: _Diffed, a: str, b: str) -> dict[str, Any]:
    """What changes from version ``va`` (named ``a`` by the caller) to ``vb`` (``b``): keys added, removed, changed (per
    changed key, in ``changes``: the norm of ``alpha v`` 's difference, the cosine of
    the two vectors, both alphas and, where a side has an adapter map, ``map``:
    added, removed, changed or unchanged, with ``map_delta`` when both have one of one
    rank). What cannot be compared (a map on one side only, maps of two ranks,
    vectors of two dimensions) is said in ``not_compared``, never a number."""
    if is_chain(va.manifest) or is_chain(vb.manifest):
        return chain_diff(va, vb)
    sa, sb = _keys(va), _keys(vb)
    common = sorted(set(sa) & set(sb))
    changes = {k: c for k in common if (c := key_change(sa[k], sb[k])) is not None}
    return {"from": a, "to": b, "added": sorted(set(sb) - set(sa)),
            "removed": sorted(set(sa) - set(sb)), "changed": sorted(changes),
            "changes": changes, "unchanged": len(common) - len(changes),
            "not_compared": not_compared(changes, a, b)}


#: Differences below this (in norm, or in alpha) are float noise, not a change.
DIFF_TOL = 1e-6


#: One key of a version: its alpha, its vector and its adapter map (U and V flattened;
#: None without one).
VersionKey = tuple[float, np.ndarray, "np.ndarray | None"]


def key_change(old: VersionKey, new: VersionKey) -> dict[str, Any] | None:
    """How one key's (alpha, vector, map) changed, or None when it did not: the norm of the
    difference of the applied offsets ``alpha v``, the cosine of the vectors, both alphas;
    ``map`` (with ``map_delta``) when either side has an adapter map. Parts that cannot be
    compared get no number: ``delta_norm``/``cosine`` None for vectors of two dimensions."""
    (a0, v0, m0), (a1, v1, m1) = old, new
    alphas = {"alpha_from": round(a0, 6), "alpha_to": round(a1, 6)}
    map_part = _map_change(m0, m1)
    if v0.shape != v1.shape:
        return {"delta_norm": None, "cosine": None, **alphas, **map_part,
                "dimension": f"{v0.size} -> {v1.size}"}
    delta = float(np.linalg.norm(a1 * v1 - a0 * v0))
    if delta <= DIFF_TOL and abs(a1 - a0) <= DIFF_TOL and \
            float(np.linalg.norm(v1 - v0)) <= DIFF_TOL and \
            map_part.get("map", "unchanged") == "unchanged":
        return None
    n0, n1 = float(np.linalg.norm(v0)), float(np.linalg.norm(v1))
    cosine = float(v0 @ v1) / (n0 * n1) if n0 > 0 and n1 > 0 else None
    return {"delta_norm": round(delta, 6),
            "cosine": None if cosine is None else round(cosine, 6), **alphas, **map_part}


def _map_change(m0: np.ndarray | None, m1: np.ndarray | None) -> dict[str, Any]:
    if m0 is None and m1 is None:
        return {}
    if m0 is None or m1 is None:
        return {"map": "added" if m0 is None else "removed"}
    if m0.shape != m1.shape:
        return {"map": "rank changed"}
    delta = float(np.linalg.norm(m1 - m0))
    return {"map": "changed" if delta > DIFF_TOL else "unchanged",
            "map_delta": round(delta, 6)}


def not_compared(changes: Mapping[str, Mapping[str, Any]], a: str, b: str) -> str:
    """What a diff of ``a`` -> ``b`` could not compare, in words ("" when everything)."""
    def count(what: str, value: str) -> int:
        return sum(1 for c in changes.values() if c.get(what) == value)

    parts = []
    if n := count("map", "added"):
        parts.append(f"the adapter map of {n} key(s) exists in {b} only (no map in {a})")
    if n := count("map", "removed"):
        parts.append(f"the adapter map of {n} key(s) exists in {a} only (no map in {b})")
    if n := count("map", "rank changed"):
        parts.append(f"the adapter maps of {n} key(s) have another rank in {a} and {b}")
    if n := sum(1 for c in changes.values() if c.get("dimension")):
        parts.append(f"the vectors of {n} key(s) have another dimension in {a} and {b}")
    return "; ".join(parts)


#: What a diff of two chain encoder versions compares (their manifests' records).
CHAIN_FIELDS = ("identity", "corpus_fingerprint", "base", "steps", "regime", "epochs_done",
                "added_from")


def chain_diff(va: _Diffed, vb: _Diffed) -> dict[str, Any]:
    """A diff of two chain encoder versions: the record fields that changed (``changes``:
    ``{field: {"from", "to"}}``); their adapters' weights are not compared."""
    changes = {f: {"from": va.manifest.get(f), "to": vb.manifest.get(f)} for f in CHAIN_FIELDS
               if va.manifest.get(f) != vb.manifest.get(f)}
    kinds = {v.name: v.manifest.get("kind") or "state" for v in (va, vb)}
    return {"from": va.name, "to": vb.name, "kind": "chain", "kinds": kinds, "added": [],
            "removed": [], "changed": sorted(changes), "changes": changes,
            "unchanged": len(CHAIN_FIELDS) - len(changes),
            "not_compared": "the chain encoders' adapter weights"}


def _keys(v: _Diffed) -> dict[str, VersionKey]:
    if not v.state_path.exists():
        return {}
    st = v.load()
    maps: dict[int, np.ndarray] = {
        i: np.concatenate([st.parts.u[j].ravel(), st.parts.v[j].ravel()]).astype(np.float64)
        for j, i in enumerate(st.parts.adapter_rows.tolist())}
    return {k: (float(st.alpha[i]), np.asarray(st.vectors[i], dtype=np.float64), maps.get(i))
            for i, k in enumerate(st.keys)}


__all__ = ["CHAIN_FIELDS", "DIFF_TOL", "VersionKey", "chain_diff", "key_change",
           "not_compared", "version_diff"]
