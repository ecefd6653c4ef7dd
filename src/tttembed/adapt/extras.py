"""What the adapter and neighbour scopes learn beyond their groups' vectors: the one
step shared by ``learn`` (:mod:`tttembed.ttt.distil`) and the guard's folds
(:mod:`tttembed.ttt.guard`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tttembed.adapt.adapter import RANK, learn_adapters
from tttembed.adapt.batch import LearnResult, RewardBatch
from tttembed.adapt.neighbour import neighbour_hyperparameters, neighbour_parts
from tttembed.adapt.parts import StateParts


def scope_parts(scope: str, batch: RewardBatch, res: LearnResult, first_x: np.ndarray,
                objective: str, *, rank: int = RANK, seed: int = 0
                ) -> tuple[LearnResult, StateParts]:
    """What the adapter and neighbour scopes learn beyond the vectors ``res`` of their
    groups: ``adapter`` the maps, started at those (task-wise) vectors, and the vectors
    they end with; ``neighbour`` each group's query embedding ``first_x`` (one per
    group, group order). Other scopes: ``res`` and no parts."""
    if scope == "adapter":
        ad = learn_adapters(batch, len(res.vectors), res.vectors, objective, rank=rank,
                            seed=seed)
        hp = {**res.hyperparameters, "adapter": ad.hyperparameters}
        return replace(res, vectors=ad.vectors, final_loss=ad.final_loss,
                       hyperparameters=hp), ad.parts()
    if scope == "neighbour":
        hp = {**res.hyperparameters, "neighbour": neighbour_hyperparameters()}
        return replace(res, hyperparameters=hp), neighbour_parts(first_x)
    return res, StateParts()


__all__ = ["scope_parts"]
