"""What the learner runs with: one frozen object (``tttembed loop`` and ``serve --learn``
build it from the same options)."""

from __future__ import annotations

from dataclasses import dataclass

from tttembed.core.errors import ConfigError

#: Scopes a learning cycle may use (``--scope``), and its default.
LOOP_SCOPES = ("global", "task", "query")
DEFAULT_SCOPES = ("query", "task")


@dataclass(frozen=True)
class LoopConfig:
    """``registry`` folder; ``index`` it serves; ``judge`` scorer spec; ``store`` spec
    (None: ``loop.sqlite`` in the registry); ``corpus`` the documents' texts (default:
    the index's source). Budget: ``judge_budget`` pairs in total (judge, validation and
    drift re-scores), at most ``judge_rpm`` a minute. A cycle runs every
    ``learn_every`` new rewards (or when the judge has nothing left and some reward is
    new). ``judge_depth``: served ranks the judge considers; ``depth``: the base
    retrieval's candidates per query; ``drift_sample`` pairs re-scored a cycle, freezing
    above ``drift_threshold`` mean disagreement; ``audit``: ``qrels:PATH`` of people's
    judgments (AUC below ``audit_min_auc`` freezes)."""

    registry: str
    index: str
    judge: str
    store: str | None = None
    corpus: str | None = None
    judge_budget: int = 1000
    judge_rpm: float = 600.0
    learn_every: int = 100
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    judge_depth: int = 10
    depth: int = 100
    drift_sample: int = 20
    drift_threshold: float = 0.3
    audit: str | None = None
    audit_min_auc: float = 0.6
    validate_share: float = 0.1
    poll_s: float = 0.5
    #: while frozen, seconds between audits when no cycle is due (promotions resume when
    #: the judge agrees again, even without new traffic)
    reaudit_s: float = 60.0
    seed: int = 0
    threads: int | None = 1
    nice: int = 10

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", tuple(self.scopes))
        bad = [s for s in self.scopes if s not in LOOP_SCOPES]
        if bad or not self.scopes:
            raise ConfigError(f"--scope must name some of {', '.join(LOOP_SCOPES)}, got "
                              f"{', '.join(self.scopes) or 'none'}")
        if self.judge_budget < 0 or self.judge_rpm <= 0 or self.learn_every < 1:
            raise ConfigError("--judge-budget must be >= 0, --judge-rpm > 0 and "
                              "--learn-every >= 1")
        if not 0 < self.drift_threshold <= 1 or self.drift_sample < 0:
            raise ConfigError("--drift-threshold must be in (0, 1] and --drift-sample >= 0")

    def argv(self) -> list[str]:
        """The ``tttembed loop`` command line of this config (``serve --learn`` starts it)."""
        out = ["loop", "--registry", self.registry, "--index", self.index,
               "--judge", self.judge, "--judge-budget", str(self.judge_budget),
               "--judge-rpm", str(self.judge_rpm), "--learn-every", str(self.learn_every),
               "--scope", ",".join(self.scopes), "--judge-depth", str(self.judge_depth),
               "--depth", str(self.depth), "--drift-sample", str(self.drift_sample),
               "--drift-threshold", str(self.drift_threshold), "--seed", str(self.seed),
               "--nice", str(self.nice)]
        for flag, value in (("--store", self.store), ("--corpus", self.corpus),
                            ("--audit", self.audit)):
            if value:
                out += [flag, value]
        if self.audit:
            out += ["--audit-min-auc", str(self.audit_min_auc)]
        if self.threads:
            out = ["--threads", str(self.threads), *out]
        return out


__all__ = ["DEFAULT_SCOPES", "LOOP_SCOPES", "LoopConfig"]
