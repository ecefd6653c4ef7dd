"""Applying learned states to query vectors: ``unit(x + alpha v)``, the most specific
state winning for each query (query > task > global; a mixed state's query key before its
task key). The one lookup of search, serving, MTEB and the framework adapters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tttembed.adapt.scopes import key_scopes, precedence, query_keys
from tttembed.adapt.state import AdaptState
from tttembed.core.errors import DataError, StateMismatch

__all__ = ["apply_state", "apply_states", "lookup_keys", "state_owners"]


def apply_state(
    x: np.ndarray, keys: Sequence[str | None], state: AdaptState
) -> np.ndarray:
    """``unit(x_q + alpha_g v_g)`` for queries whose key is in ``state``; others unchanged.

    ``x`` (n, d) unit query vectors, ``keys[q]`` the query's group key under the state's
    scope (:func:`tttembed.adapt.scopes.query_keys`), or None. Returns a new float32 array.
    """
    return apply_states(x, {state.scope: keys}, [state])


def apply_states(
    x: np.ndarray,
    keys_by_scope: Mapping[str, Sequence[str | None]],
    states: Sequence[AdaptState],
) -> np.ndarray:
    """Apply several states (e.g. one per scope); the most specific one wins per query.

    Precedence is query > task > global; within one scope the first state listed that
    holds the key wins. ``keys_by_scope[scope]`` gives each query's key under ``scope``.
    """
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise DataError(f"query vectors must be (n, d), got shape {x.shape}")
    owner, row = state_owners(keys_by_scope, states, len(x))
    out = x.copy()
    for s, st in enumerate(states):
        if st.dim != x.shape[1]:
            raise StateMismatch(
                f"state has dimension {st.dim}, the query vectors have {x.shape[1]}; "
                "learn a state with this embedder"
            )
        hit = owner == s
        if not hit.any():
            continue
        g = row[hit]
        u = x[hit] + (st.alpha[g, None] * st.vectors[g]).astype(np.float32)
        out[hit] = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    return out


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
            rows = np.array([index.get(k, -1) if k is not None else -1 for k in keys],
                            dtype=np.int64)
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
