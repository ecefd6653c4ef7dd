"""What the learner runs with: one frozen object (``tttembed loop`` and ``serve --learn``
build it from the same options)."""

from __future__ import annotations

from dataclasses import dataclass

from tttembed.core.errors import ConfigError
from tttembed.loop.retention import Retention

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
    judgments (AUC below ``audit_min_auc`` freezes); all audits together pay at most
    ``audit_share`` of ``judge_budget`` (:attr:`audit_cap` pairs). ``judge`` ``none``: no judge, learn
    from clicks and labels only (the budget is 0). ``clicks``: how clicks become rewards
    (``ips`` debiased, ``naive`` the raw rate for comparison, ``off``), read
    ``click_settle_s`` after their search; ``interleave`` > 0: a version the offline check
    does not refuse becomes the candidate the servers interleave (``serve --interleave``)
    and is promoted only when the clicks' sequential test says it is better."""

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
    #: the share of ``judge_budget`` all audits together may pay (``--audit-share``): the
    #: drift re-scores and the people's audit set's pairs new to the ledger
    audit_share: float = 0.2
    #: queries the promotion test needs at least (``--min-queries``)
    min_queries: int = 20
    validate_share: float = 0.1
    poll_s: float = 0.5
    #: while frozen, seconds between audits when no cycle is due (promotions resume when
    #: the judge agrees again, even without new traffic)
    reaudit_s: float = 60.0
    clicks: str = "ips"
    click_settle_s: float = 300.0
    interleave: float = 0.0
    seed: int = 0
    threads: int | None = 1
    nice: int = 10
    #: a database registry's local copy (``--registry-cache``; None: the default)
    registry_cache: str | None = None
    #: how long traffic and versions are kept (``--retain``, ``--keep-versions``)
    retention: Retention = Retention()

    @property
    def has_judge(self) -> bool:
        """Whether a judge pays rewards (``--judge none``: clicks and labels only)."""
        from tttembed.loop.nojudge import NO_JUDGE

        return self.judge.strip().lower() != NO_JUDGE

    @property
    def audit_cap(self) -> int:
        """Judge pairs all audits together may pay (``audit_share`` of the budget)."""
        return int(self.audit_share * self.judge_budget)

    def __post_init__(self) -> None:
        from tttembed.loop.clicks.feed import CLICK_MODES

        object.__setattr__(self, "scopes", tuple(self.scopes))
        if not self.has_judge:
            object.__setattr__(self, "judge_budget", 0)
            if self.audit:
                raise ConfigError("--audit re-scores pairs through the judge: with --judge "
                                  "none there is none (drop --audit, or name a judge)")
        if self.clicks not in CLICK_MODES:
            raise ConfigError(f"--clicks must be one of {', '.join(CLICK_MODES)}, got "
                              f"{self.clicks!r}")
        if not 0 <= self.interleave <= 1 or self.click_settle_s < 0:
            raise ConfigError("--interleave must be a fraction in [0, 1] and "
                              "--click-settle-s >= 0")
        if not self.has_judge and self.clicks == "off":
            raise ConfigError("--judge none --clicks off leaves only people's labels: "
                              "give a judge or keep clicks on")
        bad = [s for s in self.scopes if s not in LOOP_SCOPES]
        if bad or not self.scopes:
            raise ConfigError(f"--scope must name some of {', '.join(LOOP_SCOPES)}, got "
                              f"{', '.join(self.scopes) or 'none'}")
        if self.judge_budget < 0 or self.judge_rpm <= 0 or self.learn_every < 1:
            raise ConfigError("--judge-budget must be >= 0, --judge-rpm > 0 and "
                              "--learn-every >= 1")
        if self.min_queries < 2:
            raise ConfigError(f"--min-queries must be >= 2 (an interval needs 2 queries), "
                              f"got {self.min_queries}")
        if not 0 <= self.audit_share <= 1:
            raise ConfigError(f"--audit-share must be a fraction of --judge-budget in [0, 1], "
                              f"got {self.audit_share:g} (0.2: a fifth of the budget)")
        if not 0 < self.drift_threshold <= 1 or self.drift_sample < 0:
            raise ConfigError("--drift-threshold must be in (0, 1] and --drift-sample >= 0")
        self.retention.check(self.click_settle_s if self.clicks != "off" else 0.0)

    def argv(self) -> list[str]:
        """The ``tttembed loop`` command line of this config (``serve --learn`` starts it)."""
        out = ["loop", "--registry", self.registry, "--index", self.index,
               "--judge", self.judge, "--judge-budget", str(self.judge_budget),
               "--judge-rpm", str(self.judge_rpm), "--learn-every", str(self.learn_every),
               "--scope", ",".join(self.scopes), "--judge-depth", str(self.judge_depth),
               "--depth", str(self.depth), "--drift-sample", str(self.drift_sample),
               "--drift-threshold", str(self.drift_threshold),
               "--min-queries", str(self.min_queries), "--clicks", self.clicks,
               "--click-settle-s", str(self.click_settle_s),
               "--interleave", str(self.interleave), "--seed", str(self.seed),
               "--nice", str(self.nice), *self.retention.argv()]
        for flag, value in (("--store", self.store), ("--corpus", self.corpus),
                            ("--audit", self.audit), ("--registry-cache", self.registry_cache)):
            if value:
                out += [flag, value]
        if self.audit:
            out += ["--audit-min-auc", str(self.audit_min_auc)]
        out += ["--audit-share", str(self.audit_share)]
        if self.threads:
            out = ["--threads", str(self.threads), *out]
        return out


def never_promotes(config: LoopConfig) -> str:
    """Why no promotion can ever happen with ``config`` ("" when one can): a promotion
    test needs ``min_queries`` judged queries, and the judge budget pays at most one
    query per pair."""
    if config.has_judge and config.min_queries > config.judge_budget:
        return (f"--min-queries {config.min_queries}: a promotion needs that many judged "
                f"queries, and --judge-budget {config.judge_budget} pairs judges at most "
                f"{config.judge_budget} queries, so no promotion can happen whatever "
                "the traffic; lower --min-queries (default 20) or raise --judge-budget")
    return ""


def check_specs(config: LoopConfig) -> None:
    """Every spec of ``config`` checked before anything starts or is paid (no model is
    loaded): the judge's scheme (one that reads judgments by query id cannot score
    traffic), the audit's ``qrels:`` path and the store's spec. A one-line ConfigError."""
    from tttembed.core.backends import factory
    from tttembed.loop.drift import audit_source
    from tttembed.score.base import uses_labels

    if not config.has_judge:
        if config.store:
            check_store(config.store)
        return
    try:
        factory("scorer", config.judge)
    except ImportError as exc:
        raise ConfigError(f"--judge {config.judge}: its backend does not import ({exc}); "
                          "install the extra it needs") from None
    except ConfigError as exc:
        raise ConfigError(f"--judge {config.judge}: {exc}") from None
    if uses_labels(config.judge):
        raise ConfigError(f"--judge {config.judge}: a judge that reads judgments by query "
                          "id cannot score live traffic (texts only); use a reranker, an "
                          "LLM judge, bm25 or a rerank: service")
    if config.audit:
        audit_source(config.audit)
    if config.store:
        check_store(config.store)


def check_store(spec: str) -> None:
    """``--store``'s spec: a known scheme, or a SQLite path whose folder exists."""
    from pathlib import Path

    from tttembed.core.backends import factory, split_spec

    scheme, _ = split_spec(spec)
    plain = "/" in scheme or "\\" in scheme or scheme == spec.strip() or len(scheme) == 1
    if not plain:
        try:
            factory("store", spec)
        except ConfigError as exc:
            raise ConfigError(f"--store {spec}: {exc}") from None
    elif Path(spec).is_dir():
        raise ConfigError(f"--store {spec} is a folder: give a SQLite file path "
                          "(e.g. DIR/loop.sqlite) or postgresql://...")
    elif not Path(spec).parent.is_dir():
        raise ConfigError(f"--store {spec}: its folder does not exist (create "
                          f"{Path(spec).parent} or give another path)")


__all__ = ["DEFAULT_SCOPES", "LOOP_SCOPES", "LoopConfig", "check_specs", "check_store"]
