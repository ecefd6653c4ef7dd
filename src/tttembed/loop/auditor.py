"""Running the drift audit within the judge budget: the seeded sample of past judge
rewards and, with ``--audit``, the people's audit set, each re-scored only after its pairs
are reserved in the store's spend account, and the judge-click gap of the cycle's click
view, which costs nothing (:mod:`tttembed.loop.drift` holds the verdict).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tttembed.loop.clicks.feed import ClickView
from tttembed.loop.config import LoopConfig
from tttembed.loop.drift import (
    DriftCheck,
    audit_set,
    judge_audit,
    people_auc,
    rescore,
    sample_audit,
    sample_rewards,
)
from tttembed.loop.store import Reward, Store
from tttembed.score.base import Scorer


class Auditor:
    """The drift audit of one loop (``spend(source, n)`` reserves ``n`` pairs and returns
    how many it got)."""

    def __init__(self, config: LoopConfig, scorer: Scorer, corpus: Any, store: Store,
                 index: Any, embedder: Any) -> None:
        self.config, self.scorer, self.corpus, self.store = config, scorer, corpus, store
        self.index, self.embedder = index, embedder
        self._audit: list[tuple[str, str, int]] | None = None

    @property
    def inner(self) -> Scorer:
        """The judge without its ledger (fresh answers)."""
        return getattr(self.scorer, "inner", self.scorer)

    def prepare(self) -> None:
        """Read the audit set now (``--audit`` checked at start: a ConfigError, never at
        the first cycle)."""
        if self.config.audit and self._audit is None:
            self._audit = audit_set(self.config.audit, self.index, self.embedder)

    def run(self, round_: int, budget: int, clicks: ClickView | None = None) -> DriftCheck:
        """Re-score what ``budget`` (the loop's, in all) allows (module docstring) and
        check the judge against ``clicks`` (the cycle's click view, its ``gap``);
        ``round_`` seeds the samples."""
        seed = self.config.seed + round_
        sample = sample_rewards(self.store.rewards(trusted_only=True),
                                self.config.drift_sample, seed)
        sample = sample[:self.store.reserve("drift", len(sample), budget)]
        auc, note = self._people_auc(seed, budget)
        gap = clicks.gap if clicks is not None and self.config.has_judge else None
        old = np.array([r.reward for r in sample])
        new = rescore(self.inner, self.corpus, sample) if sample else np.zeros(0)
        return judge_audit(old, new, threshold=self.config.drift_threshold, auc=auc,
                           min_auc=self.config.audit_min_auc, note=note, clicks=gap)

    def _people_auc(self, seed: int, budget: int) -> tuple[float | None, str]:
        """The judge's AUC on (what the budget allows of) the audit set, scored afresh;
        (None, "") without ``--audit``."""
        if not self.config.audit:
            return None, ""
        if self._audit is None:
            self._audit = audit_set(self.config.audit, self.index, self.embedder)
        granted = self.store.reserve("audit", len(self._audit), budget)
        if not granted:
            return float("nan"), "the audit set was not re-scored: no judge budget left"
        chosen = sample_audit(self._audit, granted, seed)
        pairs = [Reward("audit", q, d, float(g), 0.0) for q, d, g in chosen]
        new = rescore(self.inner, self.corpus, pairs)
        value, note = people_auc(new, np.array([r.reward for r in pairs]))
        if granted < len(self._audit):
            part = f"{granted} of the audit set's {len(self._audit)} pairs re-scored (budget)"
            note = f"{part}; {note}" if note else part
        return value, note


__all__ = ["Auditor"]
