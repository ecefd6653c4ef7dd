"""Running the drift audit within its share of the judge budget: the seeded sample of
past judge rewards re-scored afresh (bypassing the ledger) at most once per learning
cycle, the people's audit set (``--audit``) scored through the reward ledger, and the
judge-click gap of the cycle's click view, which costs nothing
(:mod:`tttembed.loop.drift` holds the verdict).

The audit set is scored once: its pairs the ledger holds (an earlier audit's, or served
pairs the judge paid for) are free to re-read, so an unchanged judge costs nothing to
audit again; only its pairs new to the ledger are paid. Every paid pair (drift re-scores
and the audit set's new pairs) is reserved in the store's spend account first, within the
budget left and within ``--audit-share`` of the budget for all audits together
(:attr:`~tttembed.loop.config.LoopConfig.audit_cap`); a re-score that failed is given
back. With less room than the audit set needs, a seeded sample of its new pairs is paid
(the same seed each time, so what was paid is what is read again).
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
from tttembed.ttt.rewards import doc_items

#: The spend sources the audit share caps together.
AUDIT_SOURCES = ("audit", "drift")


class Auditor:
    """The drift audit of one loop (module docstring)."""

    def __init__(self, config: LoopConfig, scorer: Scorer, corpus: Any, store: Store,
                 index: Any, embedder: Any, *, task: str | None = None) -> None:
        self.config, self.scorer, self.corpus, self.store = config, scorer, corpus, store
        self.index, self.embedder = index, embedder
        #: the task whose rewards the drift sample is drawn from (None: every task); the
        #: chain learner's (``/chain``) re-scores only what its own judge answered
        self.task = task
        self._audit: list[tuple[str, str, int]] | None = None
        #: audit-set pairs known to be in the ledger (they only ever join it)
        self._held: set[int] = set()

    @property
    def inner(self) -> Scorer:
        """The judge without its ledger (fresh answers)."""
        return getattr(self.scorer, "inner", self.scorer)

    @property
    def share(self) -> tuple[int, tuple[str, ...]]:
        """The audits' cap within the budget (``--audit-share``), for the store."""
        return self.config.audit_cap, AUDIT_SOURCES

    def prepare(self) -> None:
        """Read the audit set now (``--audit`` checked at start: a ConfigError, never at
        the first cycle)."""
        if self.config.audit and self._audit is None:
            self._audit = audit_set(self.config.audit, self.index, self.embedder)

    def run(self, round_: int, budget: int, clicks: ClickView | None = None, *,
            fresh: bool = True) -> DriftCheck:
        """Audit within ``budget`` (the loop's, in all) and the audit share (module
        docstring) and check the judge against ``clicks`` (the cycle's click view, its
        ``gap``); ``fresh``: a learning cycle's audit, which re-scores the drift sample
        (a timed re-audit while frozen re-reads what costs nothing); ``round_`` seeds
        the drift sample."""
        sample: list[Reward] = []
        if fresh:
            past = [r for r in self.store.rewards(trusted_only=True)
                    if self.task is None or r.task == self.task]
            sample = sample_rewards(past, self.config.drift_sample, self.config.seed + round_)
            sample = sample[:self.store.reserve("drift", len(sample), budget,
                                                share=self.share)]
        auc, note = self._people_auc(budget, self.config.seed + round_ if fresh else None)
        gap = clicks.gap if clicks is not None and self.config.has_judge else None
        old = np.array([r.reward for r in sample])
        new = rescore(self.inner, self.corpus, sample) if sample else np.zeros(0)
        self.store.release("drift", int((~np.isfinite(new)).sum()))
        return judge_audit(old, new, threshold=self.config.drift_threshold, auc=auc,
                           min_auc=self.config.audit_min_auc, note=note, clicks=gap)

    def _held_now(self, rows: list[int]) -> set[int]:
        """Which audit-set rows ``rows`` the ledger holds (a judge without a ledger:
        none)."""
        known = getattr(self.scorer, "known", None)
        if known is None or self._audit is None:
            return set()
        out = set()
        for i in rows:
            text, doc = self._texts(i)
            if int(known(text, [doc])):
                out.add(i)
        return out

    def _texts(self, row: int) -> tuple[str, str]:
        """The (question, document) texts of audit-set row ``row``: the ledger's key."""
        text, doc, _ = (self._audit or [])[row]
        return text, doc_items([doc], self.corpus)[0].text

    def _people_auc(self, budget: int, seed: int | None = None) -> tuple[float | None, str]:
        """The judge's AUC on the audit set's pairs the ledger holds and those the
        audits' share can still pay, or, when a fresh sample (``seed`` given: a learning
        cycle's audit) says the judge changed since, on that sample (:meth:`_changed`);
        (None, "") without ``--audit``."""
        if not self.config.audit:
            return None, ""
        if self._audit is None:
            self._audit = audit_set(self.config.audit, self.index, self.embedder)
        pairs = self._audit
        todo = [i for i in range(len(pairs)) if i not in self._held]
        self._held |= self._held_now(todo)
        new = [i for i in todo if i not in self._held]
        granted = self.store.reserve("audit", len(new), budget, share=self.share)
        chosen = sample_audit([pairs[i] for i in new], granted, self.config.seed)
        pick = {(q, d) for q, d, _ in chosen}
        rows = sorted(self._held) + [i for i in new if pairs[i][:2] in pick]
        if not rows:
            return float("nan"), ("the audit set was not scored: no judge budget left "
                                  "within the audit share")
        asked = [Reward("audit", pairs[i][0], pairs[i][1], float(pairs[i][2]), 0.0)
                 for i in rows]
        scores = rescore(self.scorer, self.corpus, asked)  # through the ledger
        bought = [i for i in new if pairs[i][:2] in pick]
        if getattr(self.scorer, "known", None) is None:  # no ledger: what was answered
            at = {i: j for j, i in enumerate(rows)}
            paid = {i for i in bought if np.isfinite(scores[at[i]])}
        else:  # the ledger pays a pair of texts once (two ids of one text: one pair)
            held = self._held_now(bought)
            self._held |= held
            paid = set({self._texts(i): i for i in sorted(held)}.values())
        self.store.release("audit", granted - len(paid))
        value, note = people_auc(scores, np.array([r.reward for r in asked]))
        changed = self._changed(budget, seed, dict(zip(rows, scores)))
        if changed is not None:
            return changed
        if len(rows) < len(pairs):
            part = (f"{len(rows)} of the audit set's {len(pairs)} pairs scored ({len(paid)} "
                    f"paid now; the audit share is {self.config.audit_cap} pairs)")
            note = f"{part}; {note}" if note else part
        return value, note

    def _changed(self, budget: int, seed: int | None, held: dict[int, float]
                 ) -> tuple[float, str] | None:
        """Re-score afresh (bypassing the ledger) a seeded sample of ``--drift-sample``
        audit-set pairs; when they disagree with the ledger's answers (``held``) by more
        than ``--drift-threshold`` on average, the judge changed since it was read: its
        AUC on the fresh sample, with why. None when not re-scored or unchanged."""
        pairs = self._audit or []
        if seed is None or not pairs:
            return None
        want = min(self.config.drift_sample, len(pairs))
        # re-scored afresh, past the ledger: drift re-scores, on the account as such
        granted = self.store.reserve("drift", want, budget, share=self.share)
        chosen = sample_audit(pairs, granted, seed)
        if not chosen:
            return None
        at = {p[:2]: i for i, p in enumerate(pairs)}
        asked = [Reward("audit", q, d, float(g), 0.0) for q, d, g in chosen]
        fresh = rescore(self.inner, self.corpus, asked)
        self.store.release("drift", int((~np.isfinite(fresh)).sum()))
        old = np.array([held.get(at[(q, d)], np.nan) for q, d, _ in chosen])
        ok = np.isfinite(old) & np.isfinite(fresh)
        if not ok.any() or np.abs(old[ok] - fresh[ok]).mean() <= self.config.drift_threshold:
            return None
        dis = float(np.abs(old[ok] - fresh[ok]).mean())
        value, note = people_auc(fresh, np.array([r.reward for r in asked]))
        why = (f"the judge changed since its ledger answers (mean |ledger - fresh| {dis:.3f} "
               f"on {int(ok.sum())} audit pairs): AUC on the {len(chosen)} pairs re-scored "
               "afresh")
        return value, f"{why}; {note}" if note else why


__all__ = ["AUDIT_SOURCES", "Auditor"]
