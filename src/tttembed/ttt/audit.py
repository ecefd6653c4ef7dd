"""The reward audit (METHOD.md Part 3): does the judge agree with people?

The guard trusts the judge: a judge that is systematically wrong (an anti-correlated
reranker, a broken prompt) looks like a large gain to it. ``--audit qrels:PATH`` names a
few human-judged queries of the query set; the judge scores their judged documents and
their top-10 retrieved documents the file does not judge (non-relevant, as trec_eval
counts them: BEIR qrels usually list relevant documents only), through the ledger (pairs
it already paid cost nothing), and the audit is the ROC AUC of the judge's rewards
against the human relevance (grade >= 1), with a 95% bootstrap interval over queries. A judge whose AUC is below ``--audit-min-auc`` (default 0.6) is
refused before anything is learned from it.

This quantity is the "audit AUC" (:data:`~tttembed.metrics.quality.AUDIT_AUC`), always
printed with its pair set; ``eval``'s "reward AUC" is another quantity (the pairs a
budget paid, :mod:`tttembed.metrics.quality`), so the two may sit on either side of the
refusal line for one judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.metrics.quality import AUDIT_AUC
from tttembed.ttt.guard import Pay
from tttembed.ttt.queries import QuerySet

#: The lowest agreement with people a judge may show, by default.
MIN_AUC = 0.6
N_BOOT = 2000


@dataclass(frozen=True)
class Audit:
    """The judge's agreement with the human judgments of ``path``."""

    path: str
    queries: int
    pairs: int
    auc: float
    ci: tuple[float, float]
    min_auc: float
    #: Pairs judged in ``path`` / retrieved in the base top-``depth`` but not judged there.
    judged: int = 0
    depth: int = 10

    def as_dict(self) -> dict[str, Any]:
        return {"name": AUDIT_AUC, "path": self.path, "queries": self.queries,
                "pairs": self.pairs, "judged": self.judged,
                "unjudged": self.pairs - self.judged, "pair_set": self.pair_set(),
                "auc": self.auc, "ci": list(self.ci), "min_auc": self.min_auc}

    def pair_set(self) -> str:
        """The pairs this AUC was measured on, in words."""
        return (f"the {self.pairs:,} audit pairs: the {self.judged:,} judged documents of "
                f"{self.queries:,} queries in {self.path} and their "
                f"{self.pairs - self.judged:,} unjudged top-{self.depth} documents of the base "
                "ranking (as non-relevant)")


def audit_line(audit: Mapping[str, Any]) -> str:
    """``audit AUC 0.535 [0.491, 0.578] on the 1,030 audit pairs: ...`` from an
    :meth:`Audit.as_dict` (a state's ``audit``); an older record without its pair set
    says its pairs and queries."""
    ci = audit.get("ci") or [float("nan")] * 2
    pairs = audit.get("pair_set") or (f"the {audit['pairs']:,} audit pairs of "
                                      f"{audit['queries']:,} queries in {audit['path']}")
    return (f"{AUDIT_AUC} {audit['auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] on {pairs} "
            f"(minimum {audit['min_auc']:g})")


def audit_spec(spec: str) -> Path:
    """``qrels:PATH`` -> PATH (the only audit source: human judgments)."""
    scheme, sep, rest = spec.partition(":")
    if scheme != "qrels" or not sep or not rest:
        raise ConfigError(f"--audit takes qrels:PATH (human judgments of a few of the "
                          f"queries), not {spec!r}")
    return Path(rest)


def audit_judge(spec: str, queries: QuerySet, pay: Pay, *, min_auc: float = MIN_AUC,
                seed: int = 0, candidates: Mapping[str, Sequence[str]] | None = None,
                depth: int = 10) -> Audit:
    """Score the audited queries' judged documents (and their top-``depth``
    ``candidates`` not judged there, as grade 0) with the judge and refuse it when its
    AUC against the human relevance is below ``min_auc`` (a DataError naming the file)."""
    from tttembed.data.beir import load_judgments

    path = audit_spec(spec)
    if path.is_dir():  # qrels:FOLDER, as eval and the loop take it: its test judgments
        path = path / "qrels" / "test.tsv"
    judged = load_judgments(path)
    key_of = {(t, q): k for t, q, k in zip(queries.tasks, queries.qids, queries.keys)}
    keys = {q: key_of[(t, q)] for t in dict.fromkeys(queries.tasks) for q in judged
            if (t, q) in key_of}
    if not keys:
        raise DataError("no query of the audit's judgments is among the queries learned from",
                        path=path, fix="judge a few of these queries' documents by hand")
    labels = {keys[q]: {**{d: 0 for d in (candidates or {}).get(keys[q], [])[:depth]},
                        **judged[q]} for q in keys}
    rewards = pay([(key, d) for key, docs in labels.items() for d in docs])
    auc, ci, n = _agreement(labels, rewards, seed)
    judged_n = sum(1 for q in keys for d in judged[q]
                   if np.isfinite(rewards.get(keys[q], {}).get(d, np.nan)))
    result = Audit(str(path), len(keys), n, auc, ci, float(min_auc), judged_n, depth)
    if not np.isfinite(auc):
        raise DataError(f"the audit cannot measure the judge: its {n} pairs of {len(keys)} "
                        "queries are all relevant or all non-relevant (or unscored)",
                        path=path, fix="audit queries whose judged and retrieved documents "
                        "include non-relevant ones")
    if auc < min_auc:
        raise DataError(
            f"the judge agrees with these human judgments at {AUDIT_AUC} {auc:.3f} "
            f"[{ci[0]:.3f}, {ci[1]:.3f}] on {result.pair_set()}, below "
            f"--audit-min-auc {min_auc:g}: learning from it would follow a wrong judge",
            path=path, fix="fix the judge (its model, prompt or instruction), or lower "
            "--audit-min-auc if you accept it")
    return result


def _agreement(labels: Mapping[str, Mapping[str, int]],
               rewards: Mapping[str, Mapping[str, float]], seed: int
               ) -> tuple[float, tuple[float, float], int]:
    """AUC of rewards vs relevance over the audited pairs, and its bootstrap interval
    over queries (pairs of one query resampled together)."""
    from tttembed.metrics.quality import auc

    per = []
    for key, docs in labels.items():
        got = rewards.get(key, {})
        pairs = [(got[d], g >= 1) for d, g in docs.items() if np.isfinite(got.get(d, np.nan))]
        if pairs:
            per.append(pairs)
    flat = [p for q in per for p in q]
    value = auc([s for s, _ in flat], [y for _, y in flat]) if flat else float("nan")
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(N_BOOT if len(per) > 1 else 0):
        pick = [per[i] for i in rng.integers(0, len(per), len(per))]
        sample = [p for q in pick for p in q]
        boot.append(auc([s for s, _ in sample], [y for _, y in sample]))
    boot = [b for b in boot if np.isfinite(b)]
    lo, hi = (np.percentile(boot, [2.5, 97.5]).tolist() if boot else [value, value])
    return value, (float(lo), float(hi)), len(flat)


__all__ = ["MIN_AUC", "Audit", "audit_judge", "audit_line", "audit_spec"]
