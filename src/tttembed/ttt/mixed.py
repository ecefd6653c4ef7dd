"""The one ``mixed`` state that applies method auto's choice (:mod:`tttembed.ttt.select`):
per task its shared part under the task's key (with an adapter's map), its query part
under the rewarded texts' keys, and, where the neighbour part is kept, those texts'
embeddings for neighbour transfer. Every part is applied by
:func:`tttembed.adapt.apply.apply_states`, so search, serving, MTEB and the vector
databases serve it unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.parts import StateParts
from tttembed.adapt.scopes import MIXED, query_key
from tttembed.ttt.guard import Table
from tttembed.ttt.options import Provenance
from tttembed.ttt.select import NEIGHBOUR, CoefFor, Selection, query_vector, shared_groups


@dataclass
class _Parts:
    keys: list[str] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    alpha: list[float] = field(default_factory=list)
    n_g: list[int] = field(default_factory=list)

    def add(self, key: str, vector: np.ndarray, alpha: float, n: int) -> None:
        self.keys.append(key)
        self.vectors.append(np.asarray(vector, np.float32))
        self.alpha.append(float(alpha))
        self.n_g.append(int(n))


def mixed_state(selection: Selection, learned: Mapping[str, AdaptState | None], table: Table,
                coef_for: CoefFor, template: AdaptState,
                provenance: Provenance = Provenance()) -> AdaptState:
    """The one state that applies ``selection``: per task its shared part (the chosen
    state's vector and the alpha its evidence chose under the task's key) and, for its rewarded texts, its
    query part. ``learned`` holds the global, task and query states learned on every
    reward; ``template`` gives the embedder, corpus and hyperparameter fields."""
    parts = _Parts()
    maps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    groups = shared_groups(selection.shared, learned, selection.shared_alpha)
    for task, (st, g, alpha) in groups.items():
        at = np.flatnonzero(st.parts.adapter_rows == g)
        if len(at):
            maps[len(parts.keys)] = (st.parts.u[at[0]], st.parts.v[at[0]])
        parts.add(task, st.vectors[g], alpha, st.n_g[g])
    kd = learned.get("query")
    rows = kd.index() if kd is not None else {}
    seen: set[str] = set()
    for q, (task, text) in enumerate(zip(table.tasks, table.texts)):
        key = query_key(task, text)
        method = selection.query.get(task, "none")
        if method == "none" or key in seen:
            continue
        seen.add(key)
        vec = query_vector(method, q, key, table, kd, rows, coef_for,
                           selection.query_alpha.get(task, "rule"))
        if vec is not None:
            parts.add(key, *vec)
    near = _neighbour_rows(selection, learned.get(NEIGHBOUR) or kd, table, parts)
    n = len(parts.keys)
    d = template.dim
    return AdaptState(
        MIXED, tuple(parts.keys),
        np.stack(parts.vectors) if n else np.zeros((0, d), np.float32),
        np.asarray(parts.alpha), np.asarray(parts.n_g, np.int64), identity=template.identity,
        dim=d, objective=template.objective, hyperparameters=template.hyperparameters,
        embedder=template.embedder, corpus_fingerprint=template.corpus_fingerprint,
        alpha_asked="rule", alpha_chosen="rule", method="auto",
        selection=selection.as_dict(), parts=_mixed_parts(maps, near, d),
        rewarded=template.rewarded, scorer=provenance.scorer,
        reward_mapping=provenance.reward_mapping, budget=provenance.budget)


def _neighbour_rows(selection: Selection, kd: AdaptState | None, table: Table,
                    parts: _Parts) -> dict[int, np.ndarray]:
    """For the tasks whose neighbour part is kept: each rewarded text's row (added with
    its query-wise vector when the query part did not add it) and its embedding."""
    out: dict[int, np.ndarray] = {}
    if kd is None:
        return out
    rows, at = kd.index(), {k: i for i, k in enumerate(parts.keys)}
    for q, (task, text) in enumerate(zip(table.tasks, table.texts)):
        key = query_key(task, text)
        g = rows.get(key)
        if selection.neighbour.get(task, "none") != NEIGHBOUR or g is None:
            continue
        if key not in at:
            at[key] = len(parts.keys)
            parts.add(key, kd.vectors[g], float(kd.alpha[g]), int(kd.n_g[g]))
        out.setdefault(at[key], table.x[q])
    return out


def _mixed_parts(maps: Mapping[int, tuple[np.ndarray, np.ndarray]],
                 near: Mapping[int, np.ndarray], d: int) -> StateParts:
    """The mixed state's adapter maps (row -> U, V) and neighbour embeddings."""
    ar = np.array(sorted(maps), np.int64)
    nr = np.array(sorted(near), np.int64)
    return StateParts(
        ar, np.stack([maps[r][0] for r in ar.tolist()]) if len(ar) else np.zeros((0, d, 0)),
        np.stack([maps[r][1] for r in ar.tolist()]) if len(ar) else np.zeros((0, d, 0)),
        nr, np.stack([near[r] for r in nr.tolist()]) if len(nr) else np.zeros((0, d)))


__all__ = ["mixed_state"]
