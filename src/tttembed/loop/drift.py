"""The drift audit: does the judge still agree with itself (and with people)?

Each cycle a seeded sample of pairs judged before is scored again by the judge itself,
bypassing the ledger (which would only replay the old rewards); the disagreement is the
mean absolute difference between the old and the new rewards. Above the threshold the
loop freezes promotions (the status says why) and distrusts the rewards judged since the
last audit that passed; the audit keeps running each cycle and promotions resume when the
agreement returns (or when a person promotes a version). With ``--audit qrels:PATH``
(people's judgments) the judge's ROC AUC on the audited pairs is measured too, and an AUC
below the minimum freezes as well. The re-scored pairs count against the judge budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tttembed.loop.store import Reward
from tttembed.score.base import Item, Scorer
from tttembed.ttt.rewards import doc_items


@dataclass(frozen=True)
class Audit:
    """One audit: pairs re-scored, the mean disagreement, the people's AUC (None without
    an audit set), whether it passed, and why not."""

    pairs: int
    disagreement: float
    auc: float | None
    passed: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "disagreement": round(self.disagreement, 4),
                "auc": None if self.auc is None else round(self.auc, 4),
                "passed": self.passed, "reason": self.reason}


def sample_pairs(rewards: Sequence[Reward], n: int, seed: int) -> list[Reward]:
    """A seeded sample of finite judge rewards, at most ``n``."""
    pool = [r for r in rewards if r.source != "feedback" and np.isfinite(r.reward)]
    if len(pool) <= n:
        return pool
    rng = np.random.default_rng(seed)
    return [pool[i] for i in sorted(rng.choice(len(pool), n, replace=False))]


def rescore(inner: Scorer, corpus: Mapping[str, Mapping[str, str]], sample: Sequence[Reward]
            ) -> np.ndarray:
    """The judge's rewards now for ``sample`` (no ledger: fresh answers)."""
    out = np.full(len(sample), np.nan)
    by_query: dict[str, list[int]] = {}
    for i, r in enumerate(sample):
        by_query.setdefault(r.query, []).append(i)
    for query, rows in by_query.items():
        items = doc_items([sample[i].doc_id for i in rows], corpus)
        out[rows] = np.asarray(inner.score(Item("", query), items), dtype=np.float64)
    return out


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUC of ``scores`` for binary ``labels`` (0.5 when a class is empty)."""
    pos, neg = scores[labels > 0], scores[labels <= 0]
    if not len(pos) or not len(neg):
        return 0.5
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def audit_set(spec: str, index: Any, embedder: Any, depth: int = 10
              ) -> list[tuple[str, str, int]]:
    """``qrels:FOLDER`` (a BEIR folder: live traffic has texts, not ids, so the audit
    needs the queries' texts) -> (query text, doc id, grade) for each judged document of
    its test queries and their top-``depth`` retrieved documents it does not judge
    (grade 0, as trec_eval counts them)."""
    from pathlib import Path

    from tttembed.core.errors import ConfigError
    from tttembed.loop.promote import top_lists
    from tttembed.ttt.audit import audit_spec
    from tttembed.ttt.queries import query_sources

    path = audit_spec(spec)
    if not Path(path).is_dir():
        raise ConfigError(f"--audit {spec}: the loop's audit takes a BEIR folder "
                          "(queries.jsonl + qrels/test.tsv), since traffic carries texts")
    qs = query_sources([path], split="test")
    qrels = next(iter(qs.qrels.values()), {})
    keep = [i for i, q in enumerate(qs.qids) if q in qrels]
    if not keep:
        raise ConfigError(f"--audit {spec}: no test query of that folder is judged")
    texts = [qs.texts[i] for i in keep]
    lists = top_lists(index, embedder.encode(texts, "query"), depth)
    out = []
    for i, text, top in zip(keep, texts, lists):
        grades = {**{d: 0 for d in top}, **qrels[qs.qids[i]]}
        out += [(text, d, int(g)) for d, g in grades.items() if d in set(index.doc_ids)]
    return out


def judge_audit(old: np.ndarray, new: np.ndarray, *, threshold: float,
                auc: float | None = None, min_auc: float = 0.6) -> Audit:
    """The verdict on re-scored pairs (``old`` vs ``new`` rewards) and the audit AUC."""
    ok = np.isfinite(old) & np.isfinite(new)
    dis = float(np.abs(old[ok] - new[ok]).mean()) if ok.any() else 0.0
    reasons = []
    if ok.any() and dis > threshold:
        reasons.append(f"the judge disagrees with its own past rewards: mean |old - new| "
                       f"{dis:.3f} on {int(ok.sum())} re-scored pairs > {threshold:g}")
    if auc is not None and auc < min_auc:
        reasons.append(f"the judge agrees with people at AUC {auc:.3f} < {min_auc:g} on "
                       "the audit set")
    return Audit(int(ok.sum()), dis, auc, not reasons, "; ".join(reasons))


__all__ = ["Audit", "judge_audit", "rescore", "roc_auc", "sample_pairs"]
