"""How to learn a state, as one object: :class:`LearnOptions` (``tttembed learn``'s
settings, the keywords of :func:`tttembed.ttt.learn.learn`), built once at the door and
checked there, then passed whole to :func:`~tttembed.ttt.learn.learn_outcome` and
:func:`~tttembed.ttt.distil.learn_state`; :class:`Provenance`, what a learned state
records of the rewards behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tttembed.adapt.adapter import RANK
from tttembed.adapt.allocate import ALLOCATIONS
from tttembed.adapt.crossval import FOLDS, parse_alpha
from tttembed.adapt.objectives import check_objective
from tttembed.adapt.scopes import check_scope
from tttembed.core.errors import ConfigError
from tttembed.ttt.audit import MIN_AUC

#: ``learn``'s methods: ``scope`` (the ``--scope`` state) or ``auto`` (chosen per task).
LEARN_METHODS = ("scope", "auto")


@dataclass(frozen=True, kw_only=True)
class LearnOptions:
    """How one state is learned; every value is checked on construction (a ConfigError
    that names the fix).

    - ``scope``: ``global``, ``task``, ``query``, ``adapter`` (with a rank ``rank``
      query-side map) or ``neighbour``; ``method``: ``"scope"`` (that scope's state) or
      ``"auto"`` (per task the deployable state the validation says helps, one ``mixed``
      state; ``scope`` ignored).
    - ``alpha``: ``"rule"`` (``n_g / (n_g + 1)``), a number in [0, 1] or ``"auto"``
      (chosen by the guard); held parsed (a float, ``"rule"`` or ``"auto"``).
    - ``objective``: ``kd``, ``rkl`` or ``grpo``; ``seed`` seeds the plan, the folds and
      the samples.
    - ``budget``: rewards per query on average; ``depth``: candidates per query;
      ``allocation``: ``"waterfill"`` (the fixed plan) or ``"active"`` (pairs chosen in
      rounds); ``dry_run``: plan and count, score nothing.
    - ``folds``: 0 (no cross-validation) or at least 2; ``validate_budget``: validation
      pairs per query the guard may pay (None: a tenth of the rewarded pairs).
    - ``audit``: ``"qrels:PATH"``, human judgments the judge must agree with at ROC AUC
      >= ``audit_min_auc``; ``trust_judge``: learn even when the judge check refuses it.
    """

    scope: str = "task"
    method: str = "scope"
    alpha: str | float = "rule"
    objective: str = "kd"
    budget: float = 10.0
    depth: int = 10
    folds: int = FOLDS
    validate_budget: float | None = None
    audit: str | None = None
    audit_min_auc: float = MIN_AUC
    allocation: str = "waterfill"
    trust_judge: bool = False
    seed: int = 0
    rank: int = RANK
    dry_run: bool = False

    def __post_init__(self) -> None:
        check_scope(self.scope)
        check_objective(self.objective)
        object.__setattr__(self, "alpha", parse_alpha(self.alpha))
        check_method(self.method)
        check_allocation(self.allocation)
        if self.folds == 1 or self.folds < 0:
            raise ConfigError("cross-validation folds must be 0 (none) or at least 2, "
                              f"got {self.folds}")
        if self.method == "auto" and self.alpha != "rule":
            raise ConfigError("--alpha applies to --method scope: method auto validates each "
                              "state at its rule alpha (drop --alpha, or use --method scope)")
        if (self.alpha == "auto" or self.method == "auto") and not self.folds:
            raise ConfigError(f"{'method' if self.method == 'auto' else 'alpha'} auto is "
                              "chosen by cross-validation: give at least 2 folds")

    @property
    def validates(self) -> bool:
        """Whether the guard's validation runs (``--method auto`` or ``--alpha auto``)."""
        return self.method == "auto" or self.alpha == "auto"


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """What a learned state records of its rewards: the scorer (its identity or spec), its
    reward mapping and the number of pairs paid for the plan."""

    scorer: str = ""
    reward_mapping: str = ""
    budget: int = 0


def check_method(method: str) -> str:
    if method not in LEARN_METHODS:
        raise ConfigError(f"unknown method {method!r}; choose one of: {', '.join(LEARN_METHODS)}")
    return method


def check_allocation(allocation: str) -> None:
    if allocation not in ALLOCATIONS:
        raise ConfigError(f"unknown allocation {allocation!r}; choose from "
                          f"{', '.join(ALLOCATIONS)}")


__all__ = ["LEARN_METHODS", "LearnOptions", "Provenance", "check_allocation", "check_method"]
