"""What ``tttembed eval`` runs (:class:`EvalConfig`) and the names it knows: protocols,
analyses, the default baselines, the metrics of every cell."""

from __future__ import annotations

from dataclasses import dataclass, field

from tttembed.adapt.allocate import ALLOCATIONS, NORMALISED_BUDGETS
from tttembed.core.errors import ConfigError
from tttembed.core.http import HttpLimits
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.execute.config import ExecutorLike, resolve_executor
from tttembed.types import ALPHA_MODES, BASELINES, SCOPES

PROTOCOLS = ("fixed", "heldout", "loto")
ANALYSES = ("alpha", "breadth-depth", "objectives")
#: The baselines run unless ``--baselines`` says otherwise; ``qdrant-rf`` is opt-in (its fit
#: scores 50 pairs per fitting query: 10,000 per task with a text scorer, see
#: :mod:`.baselines.qdrant_rf`).
DEFAULT_BASELINES: tuple[str, ...] = ("direct", "prf-avg", "prf-rocchio", "rw-rocchio")
#: The metrics of every protocol cell (per query), in this order.
CELL_METRICS = ("ndcg@10", "recall@100")
#: Key of a cell's per-query table holding the alpha ``auto`` chose (not a metric).
ALPHA_CHOSEN = "alpha_chosen"
#: Key of the guard's validation pairs (paid, cap) in an ``auto`` cell.
VALIDATION = "validation_pairs"
#: Key of method auto's choice per task (``{"task=choice": 1.0}``) in its cell.
CHOICE = "method_chosen"
#: ``--select``: method rows chosen per task by the validation (``auto``).
SELECTS = ("auto",)


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate; every field is recorded in results.json."""

    tasks: tuple[str, ...]
    embedder: str = DEFAULT_EMBEDDER
    scorers: tuple[str, ...] = ("bm25",)
    scopes: tuple[str, ...] = SCOPES
    budgets: tuple[float, ...] = NORMALISED_BUDGETS
    protocols: tuple[str, ...] = ("fixed",)
    analyses: tuple[str, ...] = ()
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    objective: str = "kd"
    alphas: tuple[str, ...] = ("rule",)  # add "auto": each scope also with alpha auto
    selects: tuple[str, ...] = ()  # "auto": a method row chosen per task (method auto)
    #: "waterfill" (the protocol's) and/or "active": TTT methods again as <method>@active
    allocations: tuple[str, ...] = ("waterfill",)
    split: str = "test"
    train_split: str | None = None
    heldout_fraction: float = 0.8
    data_root: str | None = None
    cache_dir: str | None = None
    n_resamples: int = 10000
    few_queries: int = 50
    #: HTTP backends: timeout and retries (embedder and scorers), concurrency and rpm (scorers)
    limits: HttpLimits = field(default_factory=HttpLimits)
    #: where local-model scorers pay their pairs: "local", "ray" or a Ray(address, actors, gpus)
    executor: ExecutorLike = "local"
    #: leave the document whose id is the query id out of every ranking (BEIR's
    #: ``ignore_identical_ids``); None = as each task's data says (ArguAna, Quora: on)
    ignore_identical_ids: bool | None = None

    def __post_init__(self) -> None:
        from tttembed.adapt import check_objective, check_scope

        for s in self.scopes:
            check_scope(s)
        check_objective(self.objective)
        for a in self.alphas:
            if a not in ALPHA_MODES:
                raise ConfigError(f"unknown alpha method {a!r}; choose from "
                                  f"{', '.join(ALPHA_MODES)}")
        for sel in self.selects:
            if sel not in SELECTS:
                raise ConfigError(f"unknown selection {sel!r}; choose from {', '.join(SELECTS)}")
        for al in self.allocations:
            if al not in ALLOCATIONS:
                raise ConfigError(f"unknown allocation {al!r}; choose from "
                                  f"{', '.join(ALLOCATIONS)}")
        if "waterfill" not in self.allocations:
            raise ConfigError("--allocation must include waterfill (the rows @active are "
                              "compared with), e.g. --allocation waterfill,active")
        for p in self.protocols:
            if p not in PROTOCOLS:
                raise ConfigError(f"unknown protocol {p!r}; choose from {', '.join(PROTOCOLS)}")
        for a in self.analyses:
            if a not in ANALYSES:
                raise ConfigError(f"unknown analysis {a!r}; choose from {', '.join(ANALYSES)}")
        for b in self.baselines:
            if b not in BASELINES:
                raise ConfigError(f"unknown baseline {b!r}; choose from "
                                  f"{', '.join(BASELINES)}")
        if not self.scorers:
            raise ConfigError("give at least one --scorer")
        for spec in self.scorers:
            check_label_scorer(spec)
        if any(b <= 0 for b in self.budgets):
            raise ConfigError("budgets are normalised pairs per query and must be > 0")
        resolve_executor(self.executor)


def check_label_scorer(spec: str) -> None:
    """``eval`` gives a judgment scorer (``qrels``, ``noisy-qrels``) each task's own
    judgments, so a path in its spec would be ignored: refuse it with the reason."""
    from tttembed.score.base import capabilities

    scheme, _, rest = spec.partition(":")
    path = rest.partition("?")[0]
    if path and capabilities(spec).uses_labels:
        options = rest.partition("?")[2]
        fix = scheme + (f":?{options}" if options else "")
        raise ConfigError(f"scorer {spec!r}: eval reads each task's own judgments (all its "
                          f"splits), so the path {path!r} would be ignored; give {fix!r}")
