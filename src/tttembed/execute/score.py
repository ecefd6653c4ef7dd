"""``score_pairs``: rewards of (query, documents) groups through the reward ledger,
locally or on Ray Data (one scorer load per actor)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.core.errors import BackendError, ConfigError
from tttembed.execute.embed import EXECUTORS
from tttembed.score.base import Item
from tttembed.score.ledger import LedgerScorer

Group = tuple[Item, Sequence[Item]]


def score_pairs(spec: str, groups: Sequence[Group], *, executor: str = "local",
                ray_address: str | None = None, corpus: Any = None,
                batch_size: int = 64, num_actors: int = 1, num_gpus: float = 0.0,
                ledger_path: str | os.PathLike[str] | None = None,
                cache_dir: str | os.PathLike[str] | None = None,
                options: Mapping[str, Any] | None = None,
                stats: dict[str, int] | None = None) -> list[np.ndarray]:
    """Rewards (float64, one array per group) of each query with its documents by the
    cacheable scorer ``spec``. Pairs the ledger holds are never paid again; on ``ray`` the
    others go through a ``map_batches`` stage (``num_actors`` scorers, ``num_gpus``
    each) and every result block is committed to the ledger in the driver as it arrives,
    so both executors give the same rewards and a rerun (or a run after a killed one)
    pays nothing for what was committed. ``stats``, when given, gets ``committed`` (pairs
    committed by the actors) and ``paid_here`` (pairs scored in this process)."""
    from tttembed.ttt.rewards import build_scorer

    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    scorer = build_scorer(spec, corpus, ledger_path=ledger_path, cache_dir=cache_dir,
                          **dict(options or {}))
    if not isinstance(scorer, LedgerScorer):
        raise ConfigError(f"scorer {spec!r} is not cacheable: it has no ledger to fill")
    if executor == "ray":
        _prefill_ray(scorer, groups, spec, corpus, ray_address=ray_address,
                     batch_size=batch_size, num_actors=num_actors, num_gpus=num_gpus,
                     options=options or {})
    committed = scorer.paid
    out = [scorer.score(q, list(docs)) for q, docs in groups]
    if stats is not None:
        stats.update(committed=committed, paid_here=scorer.paid - committed)
    return out


def _rows(scorer: LedgerScorer, groups: Sequence[Group]) -> dict[str, list[Any]]:
    """One row per pair the ledger does not hold yet (repeats within a group once)."""
    rows: dict[str, list[Any]] = {"g": [], "qid": [], "qtext": [], "did": [], "dtext": []}
    for g, (query, docs) in enumerate(groups):
        _, _, _, todo = scorer._plan(query.text, [d.text for d in docs])  # noqa: SLF001
        for _, i in todo:
            for key, value in zip(rows, (g, query.id, query.text, docs[i].id, docs[i].text)):
                rows[key].append(value)
    return rows


def _prefill_ray(scorer: LedgerScorer, groups: Sequence[Group], spec: str, corpus: Any, *,
                 ray_address: str | None, batch_size: int, num_actors: int,
                 num_gpus: float, options: Mapping[str, Any]) -> None:
    from tttembed.core.io import text_digest
    from tttembed.execute.ray_stage import run_score_stage

    rows = _rows(scorer, groups)
    if not rows["g"]:
        return
    for block in run_score_stage(spec, corpus, dict(options), rows, ray_address=ray_address,
                                 batch_size=batch_size, num_actors=num_actors,
                                 num_gpus=num_gpus):
        rewards = np.asarray(block["reward"], dtype=np.float64)
        if (~np.isnan(rewards) & ((rewards < 0) | (rewards > 1))).any():
            raise BackendError(f"scorer {spec} returned rewards outside [0, 1]; map raw "
                               "scores to [0, 1]")
        for g in sorted(set(int(x) for x in block["g"])):
            mine = [j for j, x in enumerate(block["g"]) if int(x) == g]
            scorer._record(text_digest(groups[g][0].text),  # noqa: SLF001
                           [text_digest(str(block["dtext"][j])) for j in mine],
                           [float(rewards[j]) for j in mine])
