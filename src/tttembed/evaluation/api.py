"""The evaluation harness as a function (``tttembed.api`` re-exports it; ``tttembed eval``
calls :func:`evaluate` and only prints). The metrics and paired statistics it uses are
in :mod:`tttembed.metrics`.

    >>> import tttembed as tt
    >>> report = tt.evaluate(["scifact"], scorers=["bm25"], data_root="data")

Light at import time: the harness modules load on first call.
"""

from __future__ import annotations

from collections.abc import Sequence

from tttembed.adapt.allocate import NORMALISED_BUDGETS
from tttembed.core.http import HttpLimits
from tttembed.core.progress import Progress
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.evaluation.config import DEFAULT_BASELINES
from tttembed.evaluation.results import EvalReport
from tttembed.execute.config import ExecutorLike
from tttembed.types import SCOPES, PathLike

__all__ = ["evaluate"]


def evaluate(tasks: Sequence[str], *, scorers: Sequence[str] = ("bm25",),
             embedder: str = DEFAULT_EMBEDDER, scopes: Sequence[str] = SCOPES,
             budgets: Sequence[float] = NORMALISED_BUDGETS,
             protocols: Sequence[str] = ("fixed",), analyses: Sequence[str] = (),
             baselines: Sequence[str] = DEFAULT_BASELINES,
             objective: str = "kd", split: str = "test", train_split: str | None = None,
             heldout_fraction: float = 0.8, data_root: PathLike | None = None,
             cache_dir: PathLike | None = None, n_resamples: int = 10000,
             use_cell_cache: bool = True, limits: HttpLimits = HttpLimits(),
             alphas: Sequence[str] = ("rule",), selects: Sequence[str] = (),
             allocation: str | Sequence[str] = "waterfill",
             progress: Progress | None = None,
             executor: ExecutorLike = "local",
             ignore_identical_ids: bool | None = None) -> EvalReport:
    """The evaluation harness: raw retrieval, direct reranking, PRF/Rocchio baselines and
    TTT-Embed scopes on the same rewarded pairs, over BEIR tasks (folder paths, or names
    under ``data_root`` / ``$TTTEMBED_DATA``), with paired tests. Everything is cached: a
    rerun makes no embedding or scorer call. ``limits`` (:class:`HttpLimits`) apply to the
    HTTP embedder and scorers; ``executor`` (``"ray"`` or a :class:`Ray`) pays local-model
    scorers' pairs on Ray, as in :func:`tttembed.ttt.learn.learn`. ``allocation``
    ``("waterfill", "active")`` adds every TTT method again on the active allocation's
    pairs (same B), as ``<method>@active``. ``ignore_identical_ids``: leave each query's
    own document (same id) out of every ranking, as BEIR and MTEB score ArguAna; None =
    as each task's data says.

        >>> report = tt.evaluate(["scifact"], scorers=["bm25"], data_root="data")
        >>> report.write("reports/run1")
    """
    from tttembed.evaluation.config import EvalConfig
    from tttembed.evaluation.runner import run_eval

    cfg = EvalConfig(tasks=tuple(tasks), embedder=embedder, scorers=tuple(scorers),
                     scopes=tuple(scopes), budgets=tuple(budgets), protocols=tuple(protocols),
                     analyses=tuple(analyses), baselines=tuple(baselines),
                     objective=objective, split=split, train_split=train_split,
                     heldout_fraction=heldout_fraction,
                     data_root=None if data_root is None else str(data_root),
                     cache_dir=None if cache_dir is None else str(cache_dir),
                     n_resamples=n_resamples, limits=limits, alphas=tuple(alphas),
                     selects=tuple(selects),
                     allocations=(allocation,) if isinstance(allocation, str)
                     else tuple(allocation),
                     executor=executor, ignore_identical_ids=ignore_identical_ids)
    return EvalReport(run_eval(cfg, progress, use_cell_cache=use_cell_cache))
