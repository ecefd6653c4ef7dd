"""Applying learned states to query vectors: ``unit(x + alpha v)`` (an adapter row:
``unit(x + alpha (v + U V^T x))``), the most specific state winning for each query
(query > task > global; a mixed state's query key before its task key; a query whose own
text has no key takes a neighbour transfer, where a state has one, before a task's or the
global vector). The one lookup of search, serving, MTEB and the framework adapters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import cast

import numpy as np

from tttembed.adapt.adapter import map_deltas
from tttembed.adapt.neighbour import key_tasks, transfer
from tttembed.adapt.scopes import key_scopes, precedence, query_keys
from tttembed.adapt.state import AdaptState
from tttembed.core.devices import quiet_numpy_blas
from tttembed.core.errors import DataError, StateMismatch

__all__ = ["apply_state", "apply_states", "lookup_keys", "neighbour_deltas", "state_deltas",
           "state_owners"]


def apply_state(
    x: np.ndarray, keys: Sequence[str | None], state: AdaptState
) -> np.ndarray:
    """``unit(x_q + alpha_g v_g)`` for queries whose key is in ``state``; others unchanged.

    ``x`` (n, d) unit query vectors, ``keys[q]`` the query's group key under the state's
    scope (:func:`tttembed.adapt.scopes.query_keys`), or None. Returns a new float32 array.
    """
    return apply_states(x, {state.scope: keys, **dict.fromkeys(key_scopes(state.scope), keys)},
                        [state])


def apply_states(
    x: np.ndarray,
    keys_by_scope: Mapping[str, Sequence[str | None]],
    states: Sequence[AdaptState],
) -> np.ndarray:
    """Apply several states (e.g. one per scope); the most specific one wins per query.

    Precedence is query > task > global; within one scope the first state listed that
    holds the key wins. ``keys_by_scope[scope]`` gives each query's key under ``scope``.
    """
    quiet_numpy_blas()  # the maps' and the neighbours' products must not slow FAISS next
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise DataError(f"query vectors must be (n, d), got shape {x.shape}")
    owner, row = state_owners(keys_by_scope, states, len(x))
    for st in states:
        if st.dim != x.shape[1]:
            raise StateMismatch(
                f"state has dimension {st.dim}, the query vectors have {x.shape[1]}; "
                "learn a state with this embedder"
            )
    near, lent = neighbour_deltas(x, keys_by_scope, states, owner, row)
    if len(x) and owner[0] >= 0 and not lent.any() and (owner == owner[0]).all():
        return _whole_batch(x, states[int(owner[0])], row)
    out = x.copy()
    for s, st in enumerate(states):
        hit = (owner == s) & ~lent
        if not hit.any():
            continue
        g = row[hit]
        u = x[hit] + state_deltas(x[hit], st, g)
        out[hit] = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    if lent.any():
        u = x[lent] + near[lent]
        out[lent] = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    return out


#: Queries per block of :func:`_whole_batch` (its temporaries stay small and in cache).
BLOCK = 128


def _whole_batch(x: np.ndarray, st: AdaptState, rows: np.ndarray) -> np.ndarray:
    """:func:`apply_states` when one state applies to every query: the same values, with
    no copy of ``x`` and in blocks of :data:`BLOCK` queries (a batch-sized float64
    temporary costs more than the arithmetic); a task or global state's batch shares one
    row, whose delta is computed once."""
    if len(st.parts.adapter_rows):
        u = x + state_deltas(x, st, rows)
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        return u
    one = (st.alpha[rows[:1], None] * st.vectors[rows[:1]]).astype(np.float32) \
        if (rows == rows[0]).all() else None
    out = np.empty_like(x)
    for i in range(0, len(x), BLOCK):
        r = rows[i:i + BLOCK]
        u = x[i:i + BLOCK] + (one if one is not None else
                              (st.alpha[r, None] * st.vectors[r]).astype(np.float32))
        out[i:i + BLOCK] = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    return out


def state_deltas(x: np.ndarray, st: AdaptState, rows: np.ndarray) -> np.ndarray:
    """``alpha_g (v_g + U_g V_g^T x)`` of queries ``x`` (m, d) under rows ``rows`` of
    ``st`` (the map term only where the row has an adapter map), float32."""
    out = (st.alpha[rows, None] * st.vectors[rows]).astype(np.float32)
    if len(st.parts.adapter_rows):
        out += st.alpha[rows, None].astype(np.float32) * map_deltas(x, st.parts, rows)
    return out


def neighbour_deltas(x: np.ndarray, keys_by_scope: Mapping[str, Sequence[str | None]],
                     states: Sequence[AdaptState], owner: np.ndarray, row: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour transfer (:mod:`tttembed.adapt.neighbour`) for the queries whose own
    text has no key in any state: ``(alpha v(x) (n, d), which queries got one)``; the
    first state listed with neighbours of a query's task lends it. One batched inner
    product per state with neighbours."""
    n = len(x)
    lent = np.zeros(n, bool)
    holders = [st for st in states if len(st.parts.neighbour_rows)]
    if not holders:  # nothing lent: zeros from calloc (untouched pages), not zeros_like
        return np.zeros(x.shape, np.float32), lent
    delta = np.zeros_like(x, dtype=np.float32)
    keys = keys_by_scope.get("query")
    if keys is None or len(keys) != n:
        raise DataError("neighbour transfer needs each query's query-wise key")
    exact = np.array([o >= 0 and "/" in states[o].keys[r] for o, r in
                      zip(owner.tolist(), row.tolist())], dtype=bool)
    tasks = key_tasks(keys)
    for st in holders:
        todo = ~exact & ~lent
        if not todo.any():
            break
        fixed = None if st.alpha_chosen == "rule" else float(st.alpha_chosen)
        d, hit = transfer(x[todo], tasks[todo], st.keys, st.vectors, st.n_g, st.parts,
                          st.hyperparameters.get("neighbour"), fixed)
        idx = np.flatnonzero(todo)[hit]
        delta[idx] = d[hit]
        lent[idx] = True
    return delta, lent


def state_owners(
    keys_by_scope: Mapping[str, Sequence[str | None]],
    states: Sequence[AdaptState],
    n: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Which state applies to each of ``n`` queries (its position in ``states``, -1 for
    none) and the group row inside it. Precedence query > task > global (a mixed state
    stands with the query-wise ones, and inside it a query's own key wins over its
    task's); within one scope the first state listed that holds the key wins."""
    owner = np.full(n, -1, dtype=np.int64)
    row = np.full(n, -1, dtype=np.int64)
    for s in sorted(range(len(states)), key=lambda i: precedence(states[i].scope)):
        st = states[s]
        index = st.index()
        for scope in key_scopes(st.scope):
            keys = keys_by_scope.get(scope)
            if keys is None:
                raise DataError(f"no {scope}-wise query keys given for the {st.scope!r} state")
            if len(keys) != n:
                raise DataError(f"{len(keys)} keys for {n} query vectors")
            get = cast("dict[str | None, int]", index).get  # a None key: -1, no key
            rows = np.fromiter(map(get, keys, repeat(-1)), dtype=np.int64, count=n)
            hit = (rows >= 0) & (owner < 0)
            owner[hit] = s
            row[hit] = rows[hit]
    return owner, row


def lookup_keys(states: Sequence[AdaptState], texts: Sequence[str], tasks: Sequence[str]
                ) -> dict[str, list[str]]:
    """Every key the ``states`` look up, per sharing scope, for queries ``texts`` of
    ``tasks``: what :func:`apply_states` and :func:`state_owners` take."""
    scopes = dict.fromkeys(sc for st in states for sc in key_scopes(st.scope))
    return {sc: query_keys(sc, list(texts), list(tasks)) for sc in scopes}
