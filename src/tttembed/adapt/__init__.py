"""TTT-Embed's numerical core: objectives, the batched optimizer, scopes and the state.

Pure: arrays in, arrays out; no files (except :mod:`~tttembed.adapt.state`), no models,
no network. Typical use for one scope::

    groups = make_groups("task", qids, tasks)      # qids/tasks of the rewarded queries
    o = groups.order()          # build the table in group order: no sorted copy of z
    batch = RewardBatch(x[o], z[o], r[o], groups.index[o], groups.weights[o])
    result = learn_vectors(batch, len(groups.keys))
    state = AdaptState("task", groups.keys, result.vectors, result.alpha, result.n_g,
                       identity=embedder.identity, dim=embedder.dim,
                       hyperparameters=result.hyperparameters)
    save_state("out/vectors.npz", state)
    x_new = apply_state(x_all, query_keys("task", all_texts, all_tasks), state)
"""

from __future__ import annotations

from tttembed.adapt.apply import apply_state, apply_states, state_owners
from tttembed.adapt.objectives import (
    LR,
    OBJECTIVES,
    RIDGE,
    STEPS,
    TAU_S,
    TAU_T,
    check_objective,
    loss_and_grad,
    make_targets,
)
from tttembed.adapt.optimize import LearnResult, RewardBatch, hyperparameters, learn_vectors
from tttembed.adapt.scopes import (
    GLOBAL_KEY,
    PRECEDENCE,
    SCOPES,
    Groups,
    alpha_from_counts,
    check_scope,
    group_key,
    make_groups,
    query_key,
    query_keys,
)
from tttembed.adapt.state import AdaptState, load_state, save_state, state_path

__all__ = [
    "GLOBAL_KEY", "LR", "OBJECTIVES", "PRECEDENCE", "RIDGE", "SCOPES", "STEPS", "TAU_S",
    "TAU_T", "AdaptState", "Groups", "LearnResult", "RewardBatch", "alpha_from_counts",
    "apply_state", "apply_states", "check_objective", "check_scope", "group_key",
    "hyperparameters", "learn_vectors", "load_state", "loss_and_grad", "make_groups",
    "make_targets", "query_key", "query_keys", "save_state", "state_owners", "state_path",
]
