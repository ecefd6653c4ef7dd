"""The evaluation's public Python API: trec_eval-style metrics of a run, per-query
metrics, a paired comparison, and the evaluation harness (``tttembed.api`` re-exports
them unchanged; ``tttembed eval`` calls :func:`evaluate` and only prints).

    >>> import tttembed as tt
    >>> tt.run_metrics(qrels, result.to_run())["ndcg@10"]
    >>> report = tt.evaluate(["scifact"], scorers=["bm25"], data_root="data")

Light at import time: the metric, statistics and harness modules load on first call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from tttembed.adapt.allocate import NORMALISED_BUDGETS
from tttembed.adapt.scopes import SCOPES
from tttembed.core.progress import Progress
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.evaluation.results import EvalReport
from tttembed.evaluation.stats import Comparison

PathLike = str | os.PathLike[str]

__all__ = ["compare", "evaluate", "per_query_metric", "run_metrics"]


def run_metrics(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
                metrics: Sequence[str] = ("ndcg@10", "recall@100", "mrr@10")
                ) -> dict[str, float]:
    """Mean of each metric over the judged queries (trec_eval's rules), 0-1.

        >>> tt.run_metrics(qrels, result.to_run())["ndcg@10"]
        0.6451
    """
    from tttembed.evaluation.metrics import evaluate as _evaluate

    return _evaluate(qrels, run, metrics=tuple(metrics))


def per_query_metric(qrels: Mapping[str, Mapping[str, int]],
                     run: Mapping[str, Mapping[str, float]], metric: str = "ndcg@10"
                     ) -> dict[str, float]:
    """One metric for each judged query of ``run`` (the input of ``compare``).

        >>> raw = tt.per_query_metric(qrels, result.to_run())
    """
    from tttembed.evaluation.metrics import evaluate_per_query

    return evaluate_per_query(qrels, run, (metric,))[metric]


def compare(a: Mapping[str, float], b: Mapping[str, float], *,
            n_resamples: int = 10000, seed: int = 0) -> Comparison:
    """Paired randomisation test and bootstrap interval of ``mean(a - b)`` over shared ids.

        >>> tt.compare(per_query_adapted, per_query_raw).p_value
    """
    from tttembed.evaluation.stats import compare as _compare

    return _compare(a, b, n_resamples=n_resamples, seed=seed)


def evaluate(tasks: Sequence[str], *, scorers: Sequence[str] = ("bm25",),
             embedder: str = DEFAULT_EMBEDDER, scopes: Sequence[str] = SCOPES,
             budgets: Sequence[float] = NORMALISED_BUDGETS,
             protocols: Sequence[str] = ("fixed",), analyses: Sequence[str] = (),
             baselines: Sequence[str] = ("direct", "prf-avg", "prf-rocchio", "rw-rocchio"),
             objective: str = "kd", split: str = "test", train_split: str | None = None,
             heldout_fraction: float = 0.8, data_root: PathLike | None = None,
             cache_dir: PathLike | None = None, resamples: int = 10000,
             use_cell_cache: bool = True, timeout: float | None = None,
             max_retries: int | None = None, alphas: Sequence[str] = ("rule",),
             progress: Progress | None = None, concurrency: int | None = None,
             rpm: float | None = None, executor: str = "local",
             ray_address: str | None = None, ray_actors: int = 1,
             ray_gpus: float = 0.0) -> EvalReport:
    """The evaluation harness: raw retrieval, direct reranking, PRF/Rocchio baselines and
    TTT-Embed scopes on the same rewarded pairs, over BEIR tasks (folder paths, or names
    under ``data_root`` / ``$TTTEMBED_DATA``), with paired tests. Everything is cached: a
    rerun makes no embedding or scorer call. ``concurrency`` / ``rpm`` limit the HTTP
    scorers (as ``learn``'s); ``executor`` / ``ray_address`` / ``ray_actors`` /
    ``ray_gpus`` pay local-model scorers' pairs on Ray, as in :func:`learn`.

        >>> report = tt.evaluate(["scifact"], scorers=["bm25"], data_root="data")
        >>> report.write("reports/run1")
    """
    from tttembed.evaluation.runner import EvalConfig, run_eval

    cfg = EvalConfig(tasks=tuple(tasks), embedder=embedder, scorers=tuple(scorers),
                     scopes=tuple(scopes), budgets=tuple(budgets), protocols=tuple(protocols),
                     analyses=tuple(analyses), baselines=tuple(baselines),
                     objective=objective, split=split, train_split=train_split,
                     heldout_fraction=heldout_fraction,
                     data_root=None if data_root is None else str(data_root),
                     cache_dir=None if cache_dir is None else str(cache_dir),
                     n_resamples=resamples, timeout=timeout, max_retries=max_retries,
                     alphas=tuple(alphas), concurrency=concurrency, rpm=rpm,
                     executor=executor, ray_address=ray_address, ray_actors=ray_actors,
                     ray_gpus=ray_gpus)
    return EvalReport(run_eval(cfg, progress, use_cell_cache=use_cell_cache))
