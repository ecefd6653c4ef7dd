"""The query vectors of method auto's parts: a task's shared part (:func:`shared_groups`,
:func:`shared_vectors`) and a rewarded text's query-level part (:func:`query_vector`,
:func:`method_vectors`), as :mod:`tttembed.ttt.select` validates them and
:mod:`tttembed.ttt.mixed` stores them."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tttembed.adapt import AdaptState
from tttembed.adapt.adapter import map_deltas
from tttembed.adapt.feedback import Coef, feedback_vector, reward_rocchio, unit_rows
from tttembed.adapt.scopes import query_key
from tttembed.ttt.guard import Table

#: ``coef_for(task, query key)``: Qdrant's coefficients for that query.
CoefFor = Callable[[str, str], Coef]


def shared_groups(shared: Mapping[str, str], learned: Mapping[str, AdaptState | None],
                  alphas: Mapping[str, str] | None = None
                  ) -> dict[str, tuple[AdaptState, int, float]]:
    """Per task whose shared choice is not raw: the chosen state, its group row and its
    alpha (the state's own, the rule's, unless ``alphas`` shrinks it)."""
    out = {}
    for task, method in shared.items():
        st = learned.get(method)
        g = None if st is None else st.index().get("*" if st.scope == "global" else task)
        if st is not None and g is not None:
            label = (alphas or {}).get(task, "rule")
            out[task] = (st, g, _alpha(label, float(st.alpha[g])))
    return out


def _alpha(label: str, rule: float) -> float:
    """An alpha label of the guard's grid as a number (``rule``: the state's own n/(n+1))."""
    return rule if label == "rule" else float(label)


def shared_vectors(table: Table, shared: Mapping[str, str], alphas: Mapping[str, str],
                    learned: Mapping[str, AdaptState | None]) -> np.ndarray:
    """Each rewarded row's query vector under its task's shared choice."""
    out = table.x.astype(np.float32).copy()
    groups = shared_groups(shared, learned, alphas)
    for i, task in enumerate(table.tasks):
        if task in groups:
            st, g, alpha = groups[task]
            v = st.vectors[g] + map_deltas(table.x[i:i + 1], st.parts, np.array([g]))[0]
            out[i] = unit_rows(table.x[i] + alpha * v)
    return out


def method_vectors(method: str, table: Table, kd: AdaptState | None, coef_for: CoefFor,
                    query_alpha: Mapping[str, str]) -> np.ndarray:
    """Each rewarded row's unit query vector under a query-level method (query-wise
    vectors at their task's ``query_alpha``)."""
    out = np.zeros_like(table.x, dtype=np.float32)
    rows = kd.index() if kd is not None else {}
    for i in range(len(table.keys)):
        v = query_vector(method, i, query_key(table.tasks[i], table.texts[i]), table, kd,
                          rows, coef_for, query_alpha.get(table.tasks[i], "rule"))
        out[i] = table.x[i] if v is None else unit_rows(table.x[i] + v[1] * v[0])
    return out


def query_vector(method: str, q: int, key: str, table: Table, kd: AdaptState | None,
                  rows: Mapping[str, int], coef_for: CoefFor, alpha: str = "rule"
                  ) -> tuple[np.ndarray, float, int] | None:
    """(vector, alpha, n) of one rewarded text under a query-level method (``rows``: the
    query-wise state ``kd``'s key -> row; ``alpha``: the query-wise vector's, a label of
    the guard's grid, ``rule`` = the state's n/(n+1))."""
    x, z, r = table.x[q], table.zs[q], table.rs[q]
    if method == "query":
        g = rows.get(key)
        if g is None or kd is None:
            return None
        return kd.vectors[g], _alpha(alpha, float(kd.alpha[g])), int(kd.n_g[g])
    u = (reward_rocchio(x[None], [z], [r])[0] if method == "rw-rocchio"
         else unit_rows(feedback_vector(x, z, r, coef_for(table.tasks[q], table.keys[q]))))
    return np.asarray(u, np.float32) - x, 1.0, 1


__all__ = ["CoefFor", "method_vectors", "query_vector", "shared_groups",
           "shared_vectors"]
