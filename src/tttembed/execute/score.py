"""``score_pairs``: rewards of (query, documents) groups through the reward ledger,
locally or on Ray Data (one scorer load per actor); ``use_executor``: the same for the
scorer of ``learn`` / ``eval`` / ``rerank``.

Which scorers run on Ray: every cacheable scorer that makes no HTTP request (local models:
``cross-encoder:``, ``qwen3-reranker:``; also ``bm25`` and third-party schemes). The
others are scored in this process, with a note (:func:`ray_fallback`): an HTTP scorer
(``rerank:``, ``llm:``) already runs its model in a service, so Ray actors would only
relay its requests (its ``--concurrency`` is the knob, across queries too); ``qrels`` pays
nothing and keeps no ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.http import HTTP_SCHEMES
from tttembed.execute.config import ExecutorLike, Ray, executor_name, resolve_executor
from tttembed.score.base import Item, capabilities
from tttembed.score.ledger import LedgerScorer
from tttembed.types import PathLike

log = logging.getLogger(__name__)
Group = tuple[Item, Sequence[Item]]


def ray_fallback(spec: str) -> str | None:
    """Why scorer ``spec`` is scored in this process on the ``ray`` executor (None: its
    pairs go to Ray actors)."""
    if spec.partition(":")[0] in HTTP_SCHEMES:
        return (f"scorer {spec} is an HTTP service: its requests are sent from this process "
                "(--concurrency of them in flight, across queries), not from Ray actors")
    if not capabilities(spec).cacheable:
        return f"scorer {spec} reads judgments (nothing to pay): scored in this process"
    return None


@dataclass(frozen=True)
class RayScoring:
    """A :class:`LedgerScorer`'s ``executor``: its unpaid pairs go through one Ray Data
    stage (``ray.actors`` scorers, ``ray.gpus`` GPUs each, ``batch_size`` pairs per batch)
    and every result block is committed to its ledger as it arrives."""

    ray: Ray = field(default_factory=Ray)
    batch_size: int = 64
    stats: dict[str, int] = field(default_factory=dict, compare=False)

    def prefill(self, scorer: LedgerScorer, groups: Sequence[Group]) -> None:
        if scorer.origin is None:
            raise ConfigError(f"executor 'ray': scorer {scorer.spec} was not built from its "
                              "spec (give a spec string, or a scorer from load_scorer)")
        spec, options = scorer.origin
        options = dict(options)
        corpus = options.pop("corpus", None)  # bm25's documents, shipped to each actor
        before = scorer.paid
        _prefill_ray(scorer, groups, spec, corpus, ray=self.ray, batch_size=self.batch_size,
                     options=options)
        self.stats["committed"] = self.stats.get("committed", 0) + scorer.paid - before


def use_executor(scorer: Any, executor: ExecutorLike = "local", *, batch_size: int = 64
                 ) -> str | None:
    """Make ``scorer`` (from :func:`tttembed.ttt.rewards.build_scorer`) pay its pairs on
    ``executor``: ``local`` (this process) or ``ray`` (see :class:`RayScoring`). Returns a
    note, also logged, when ``ray`` was asked but this scorer is scored in this process
    (:func:`ray_fallback`); a ConfigError for an unknown executor or a scorer that was not
    built from its spec."""
    ray = resolve_executor(executor)
    if ray is None:
        if isinstance(scorer, LedgerScorer):
            scorer.executor = None
        return None
    note = ray_fallback(str(scorer.spec))
    if note is not None:
        log.warning("executor ray: %s", note)
        return note
    if not isinstance(scorer, LedgerScorer) or scorer.origin is None:
        raise ConfigError(f"executor 'ray' needs a scorer built from its spec, with its "
                          f"ledger (a spec string, or load_scorer(...)); got {scorer!r}")
    from tttembed.execute.ray_stage import import_ray

    import_ray()  # MissingDependency now, not after the plan
    scorer.executor = RayScoring(ray, int(batch_size))
    return None


def prepare(scorer: Any, executor: ExecutorLike = "local", *, embedder: Any = None,
            texts: Sequence[str] = ()) -> list[str]:
    """The model work of one ``learn`` / ``rerank`` on ``executor``: ``scorer`` pays its
    unpaid pairs there (:func:`use_executor`) and, with an ``embedder``, the query
    ``texts`` not yet cached are embedded there first. Returns the notes (also logged) of
    what stays in this process."""
    from tttembed.execute.embed import prefill_queries

    notes = [use_executor(scorer, executor)]
    if embedder is not None and texts:
        note = prefill_queries(embedder, texts, executor=executor)
        if note is not None:
            log.warning("executor %s: %s", executor_name(executor), note)
        notes.append(note)
    return [n for n in notes if n is not None]


def score_pairs(spec: str, groups: Sequence[Group], *, executor: ExecutorLike = "local",
                corpus: Any = None, batch_size: int = 64,
                ledger_path: PathLike | None = None,
                cache_dir: PathLike | None = None,
                options: Mapping[str, Any] | None = None,
                stats: dict[str, int] | None = None) -> list[np.ndarray]:
    """Rewards (float64, one array per group) of each query with its documents by the
    cacheable scorer ``spec``. Pairs the ledger holds are never paid again; on ``ray`` the
    others go through a ``map_batches`` stage (``Ray.actors`` scorers, ``Ray.gpus``
    each) and every result block is committed to the ledger in the driver as it arrives,
    so both executors give the same rewards and a rerun (or a run after a killed one)
    pays nothing for what was committed. ``stats``, when given, gets ``committed`` (pairs
    committed by the actors) and ``paid_here`` (pairs scored in this process)."""
    from tttembed.score.build import build_scorer

    ray = resolve_executor(executor)
    scorer = build_scorer(spec, corpus, ledger_path=ledger_path, cache_dir=cache_dir,
                          **dict(options or {}))
    if not isinstance(scorer, LedgerScorer):
        raise ConfigError(f"scorer {spec!r} is not cacheable: it has no ledger to fill")
    if ray is not None:
        _prefill_ray(scorer, groups, spec, corpus, ray=ray, batch_size=batch_size,
                     options=options or {})
    committed = scorer.paid
    out = [scorer.score(q, list(docs)) for q, docs in groups]
    if stats is not None:
        stats.update(committed=committed, paid_here=scorer.paid - committed)
    return out


def _rows(scorer: LedgerScorer, groups: Sequence[Group]) -> dict[str, list[Any]]:
    """One row per pair the ledger does not hold yet (a repeated pair once)."""
    rows: dict[str, list[Any]] = {"g": [], "qid": [], "qtext": [], "did": [], "dtext": []}
    seen: set[tuple[str, bytes]] = set()
    for g, (query, docs) in enumerate(groups):
        _, _, _, todo = scorer._plan(query.text, [d.text for d in docs])  # noqa: SLF001
        for dg, i in todo:
            if (query.text, dg) in seen:
                continue
            seen.add((query.text, dg))
            for key, value in zip(rows, (g, query.id, query.text, docs[i].id, docs[i].text)):
                rows[key].append(value)
    return rows


def _prefill_ray(scorer: LedgerScorer, groups: Sequence[Group], spec: str, corpus: Any, *,
                 ray: Ray, batch_size: int, options: Mapping[str, Any]) -> None:
    from tttembed.core.io import text_digest
    from tttembed.execute.ray_stage import run_score_stage

    rows = _rows(scorer, groups)
    if not rows["g"]:
        return
    for block in run_score_stage(spec, corpus, dict(options), rows, settings=ray,
                                 batch_size=batch_size):
        rewards = np.asarray(block["reward"], dtype=np.float64)
        if (~np.isnan(rewards) & ((rewards < 0) | (rewards > 1))).any():
            raise BackendError(f"scorer {spec} returned rewards outside [0, 1]; map raw "
                               "scores to [0, 1]")
        for g in sorted(set(int(x) for x in block["g"])):
            mine = [j for j, x in enumerate(block["g"]) if int(x) == g]
            scorer.record_prepaid(text_digest(groups[g][0].text),
                                  [text_digest(str(block["dtext"][j])) for j in mine],
                                  [float(rewards[j]) for j in mine])
