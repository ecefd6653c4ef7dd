"""The project's vocabulary, defined once (httpx ``_types.py`` style): the aliases of the
BEIR dict contracts and of paths, and ``Literal`` types for the closed sets, each with its
tuple of values derived by ``typing.get_args`` (the CLI's choices and the error messages
list exactly these)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, Union, get_args

if TYPE_CHECKING:  # the aliases name numpy's array; importing it here is for checkers only
    import numpy as np

#: A file or folder path, as every function that reads or writes takes it.
PathLike = Union[str, "os.PathLike[str]"]
#: BEIR judgments ``{qid: {doc_id: grade}}``.
Qrels = Mapping[str, Mapping[str, int]]
#: A run ``{qid: {doc_id: score}}``.
Run = Mapping[str, Mapping[str, float]]
#: Rewards ``{query_key: {doc_id: reward}}``.
Rewards = dict[str, dict[str, float]]
#: A BEIR corpus ``{doc_id: {"title": ..., "text": ...}}``.
Corpus = Mapping[str, Mapping[str, str]]
#: A (query key, doc id) pair to score.
Pair = tuple[str, str]
#: A served pair of the closed loop: (task, query text, doc id).
Triple = tuple[str, str, str]
#: A search callable: query vectors (n, d) and k -> FAISS's ``(D, I)``, each (n, k).
Search = Callable[["np.ndarray", int], tuple["np.ndarray", "np.ndarray"]]
#: A chain retriever's state: (question index, the passages chosen so far).
ChainState = tuple[int, tuple[int, ...]]
#: (``StateLike``, a state or the path of its file, lives beside ``AdaptState`` in
#: :mod:`tttembed.adapt.state`: this module imports nothing, so it closes no cycle.)

#: The scope of a learned vector: one for all queries, one per task, one per query.
Scope = Literal["global", "task", "query"]
#: The distillation objective (METHOD.md): soft-target KD, reverse KL, GRPO-style.
Objective = Literal["kd", "rkl", "grpo"]
#: Where model work runs.
Executor = Literal["local", "ray"]
#: How the alpha of a state is chosen (besides a fixed number).
AlphaMode = Literal["rule", "auto"]
#: The baselines ``eval`` compares TTT-Embed's scopes with (``qdrant-rf`` is opt-in).
Baseline = Literal["direct", "prf-avg", "prf-rocchio", "rw-rocchio", "qdrant-rf"]
#: The multiple-testing correction of ``compare RUN...``'s p-values (over the pairs).
Correction = Literal["holm", "bonferroni", "none"]

SCOPES: tuple[str, ...] = get_args(Scope)
OBJECTIVES: tuple[str, ...] = get_args(Objective)
EXECUTORS: tuple[str, ...] = get_args(Executor)
ALPHA_MODES: tuple[str, ...] = get_args(AlphaMode)
BASELINES: tuple[str, ...] = get_args(Baseline)
CORRECTIONS: tuple[str, ...] = get_args(Correction)

__all__ = ["ALPHA_MODES", "BASELINES", "CORRECTIONS", "EXECUTORS", "OBJECTIVES", "SCOPES",
           "AlphaMode", "Baseline", "ChainState", "Correction", "Corpus", "Executor", "Objective", "Pair", "PathLike",
           "Qrels", "Rewards", "Run", "Scope", "Search", "Triple"]
