"""The drift audit: does the judge still agree with itself (and with people)?

Each cycle a seeded sample of pairs judged before is scored again by the judge itself,
bypassing the ledger (which would only replay the old rewards); the disagreement is the
mean absolute difference between the old and the new rewards. Above the threshold the
loop freezes promotions (the status says why) and distrusts the rewards judged since the
last audit that passed; the audit keeps running each cycle and promotions resume when the
agreement returns (or when a person promotes a version). With ``--audit qrels:PATH``
(people's judgments) the judge's ROC AUC on the audited pairs is measured too, and an AUC
below the minimum freezes as well (one AUC for the whole project:
:func:`tttembed.metrics.quality.auc`, rank-based, NaN without both classes). The re-scored
pairs count against the judge budget and are reserved before the judge is asked: with
no budget left an audit re-scores nothing, and with less than the audit set needs it
re-scores a seeded sample of it. An audit whose re-scores failed, or whose sample holds
one class only, could not score: it says so and neither freezes nor passes.

With clicks as well (debiased, ``--clicks ips``) the judge is checked against people's
clicks each cycle at no judge cost: the judge-click gap
(:func:`tttembed.loop.clicks.rewards.judge_gap`: the root mean squared difference between
the clicks' debiased rate and the trusted judge reward, noise taken out, over at least
:data:`~tttembed.loop.clicks.rewards.GAP_PAIRS` pairs shown at least
:data:`~tttembed.loop.clicks.rewards.GAP_IMPRESSIONS` times each, under propensities
harvested from interventions) above the same threshold freezes as well ("the judge and
the clicks disagree"); with fewer such pairs, or propensities from the EM fallback, it
is not measured (``click_disagreement`` None) and decides nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import TTTEmbedError
from tttembed.loop.clicks.rewards import JudgeGap
from tttembed.loop.store import Reward
from tttembed.metrics.quality import auc
from tttembed.score.base import Item, Scorer
from tttembed.ttt.rewards import doc_items

log = logging.getLogger("tttembed.loop")


@dataclass(frozen=True)
class DriftCheck:
    """One drift audit: pairs re-scored, the mean disagreement, the people's AUC (None
    without an audit set, NaN when it could not be scored), whether it passed, why not,
    and what could not be measured (``note``); ``click_disagreement`` the judge-click gap
    on ``click_pairs`` pairs (None: not measured)."""

    pairs: int
    disagreement: float
    auc: float | None
    passed: bool
    reason: str = ""
    note: str = ""
    click_disagreement: float | None = None
    click_pairs: int = 0

    @property
    def blank(self) -> bool:
        """Nothing measured: no evidence either way."""
        return not self.pairs and (self.auc is None or not np.isfinite(self.auc)) \
            and self.click_disagreement is None

    def as_dict(self) -> dict[str, Any]:
        auc = None if self.auc is None or not np.isfinite(self.auc) else round(self.auc, 4)
        clicks = None if self.click_disagreement is None else round(self.click_disagreement, 4)
        return {"pairs": self.pairs, "disagreement": round(self.disagreement, 4),
                "auc": auc, "passed": self.passed, "reason": self.reason,
                "note": self.note, "click_disagreement": clicks,
                "click_pairs": self.click_pairs}


def sample_rewards(rewards: Sequence[Reward], n: int, seed: int) -> list[Reward]:
    """A seeded sample of finite judge rewards, at most ``n``."""
    pool = [r for r in rewards if r.source != "feedback" and np.isfinite(r.reward)]
    if len(pool) <= n:
        return pool
    rng = np.random.default_rng(seed)
    return [pool[i] for i in sorted(rng.choice(len(pool), n, replace=False))]


def rescore(inner: Scorer, corpus: Mapping[str, Mapping[str, str]], sample: Sequence[Reward]
            ) -> np.ndarray:
    """The judge's rewards now for ``sample`` (no ledger: fresh answers); NaN where a
    re-score failed. After the first failure the rest are not asked (NaN too): a judge
    that is down would make each of them wait out its retries."""
    out = np.full(len(sample), np.nan)
    by_query: dict[str, list[int]] = {}
    for i, r in enumerate(sample):
        by_query.setdefault(r.query, []).append(i)
    for query, rows in by_query.items():
        items = doc_items([sample[i].doc_id for i in rows], corpus)
        try:
            out[rows] = np.asarray(inner.score(Item("", query), items), dtype=np.float64)
        except (TTTEmbedError, OSError) as exc:  # NaN: this query could not be re-scored
            left = len(sample) - int(np.isfinite(out).sum()) - len(rows)
            log.warning("audit re-score failed for %d pair(s): %s (the other %d left "
                        "unasked this time)", len(rows), " ".join(str(exc).split()), left)
            break
    return out


def people_auc(new: np.ndarray, grades: np.ndarray) -> tuple[float, str]:
    """The judge's AUC against people's grades on re-scored pairs (NaN with why, when
    the re-scores failed or the pairs hold one class only)."""
    ok = np.isfinite(new)
    labels = grades[ok] > 0
    if not ok.any():
        return float("nan"), (f"the audit could not score: all {len(new)} re-scores of "
                              "the audit set failed")
    value = auc(new[ok], labels)
    if not np.isfinite(value):
        return value, (f"the audit could not score: its {int(ok.sum())} re-scored pairs "
                       "hold one class only")
    failed = int((~ok).sum())
    return value, (f"{failed} of {len(new)} audit re-scores failed" if failed else "")


def sample_audit(pairs: Sequence[tuple[str, str, int]], n: int, seed: int
                 ) -> list[tuple[str, str, int]]:
    """At most ``n`` pairs of the audit set: all of it when it fits, else a seeded
    sample that keeps the share of relevant pairs (so both classes stay when they can)."""
    if len(pairs) <= n:
        return list(pairs)
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    pos = [i for i, p in enumerate(pairs) if p[2] > 0]
    neg = [i for i, p in enumerate(pairs) if p[2] <= 0]
    n_pos = min(len(pos), max(round(n * len(pos) / len(pairs)), 1)) if pos else 0
    if neg and n_pos >= n:
        n_pos = n - 1
    n_neg = min(len(neg), n - n_pos)
    n_pos = min(len(pos), n - n_neg)
    take = [*rng.choice(pos, n_pos, replace=False).tolist()] if n_pos else []
    take += [*rng.choice(neg, n_neg, replace=False).tolist()] if n_neg else []
    return [pairs[i] for i in sorted(take)]


def audit_source(spec: str) -> tuple[Path, str]:
    """``--audit qrels:PATH`` -> (BEIR folder, split), checked without reading it whole:
    PATH a BEIR folder (its test split) or one of its qrels files (``FOLDER/qrels/
    SPLIT.tsv``, the form ``learn --audit`` takes; the queries' texts are the folder's
    ``queries.jsonl``, since live traffic carries texts, not ids). A ConfigError naming
    the path and the fix otherwise."""
    from tttembed.core.errors import ConfigError
    from tttembed.ttt.audit import audit_spec

    path = audit_spec(spec)
    if path.is_dir():
        folder, split = path, "test"
    elif path.is_file() and path.parent.name == "qrels":
        folder, split = path.parent.parent, path.stem
    elif path.is_file():
        raise ConfigError(f"--audit {spec}: the loop matches traffic by text, so a qrels "
                          "file must sit in a BEIR folder (FOLDER/qrels/SPLIT.tsv beside "
                          "FOLDER/queries.jsonl); give that file or the folder")
    else:
        raise ConfigError(f"--audit {spec}: {path} does not exist (give qrels:FOLDER or "
                          "qrels:FOLDER/qrels/test.tsv)")
    if not (folder / "queries.jsonl").is_file():
        raise ConfigError(f"--audit {spec}: {folder} has no queries.jsonl (the loop's audit "
                          "needs the judged queries' texts: a BEIR folder)")
    if not (folder / "qrels" / f"{split}.tsv").is_file():
        raise ConfigError(f"--audit {spec}: {folder} has no qrels/{split}.tsv")
    return folder, split


def audit_set(spec: str, index: Any, embedder: Any, depth: int = 10
              ) -> list[tuple[str, str, int]]:
    """``qrels:FOLDER`` or ``qrels:FOLDER/qrels/SPLIT.tsv`` (:func:`audit_source`) ->
    (query text, doc id, grade) for each judged document of its queries and their
    top-``depth`` retrieved documents it does not judge (grade 0, as trec_eval counts
    them)."""
    from tttembed.core.errors import ConfigError
    from tttembed.loop.promote import top_lists
    from tttembed.ttt.queries import query_sources

    folder, split = audit_source(spec)
    qs = query_sources([folder], split=split)
    qrels = next(iter(qs.qrels.values()), {})
    keep = [i for i, q in enumerate(qs.qids) if q in qrels]
    if not keep:
        raise ConfigError(f"--audit {spec}: no {split} query of that folder is judged")
    texts = [qs.texts[i] for i in keep]
    lists = top_lists(index, embedder.encode(texts, "query"), depth)
    out = []
    for i, text, top in zip(keep, texts, lists):
        grades = {**{d: 0 for d in top}, **qrels[qs.qids[i]]}
        out += [(text, d, int(g)) for d, g in grades.items() if d in set(index.doc_ids)]
    return out


def judge_audit(old: np.ndarray, new: np.ndarray, *, threshold: float,
                auc: float | None = None, min_auc: float = 0.6,
                note: str = "", clicks: JudgeGap | None = None) -> DriftCheck:
    """The verdict on re-scored pairs (``old`` vs ``new`` rewards), the audit AUC (an
    AUC that could not be scored, NaN, neither passes nor fails) and the judge-click gap
    (``clicks``; None: not measured)."""
    ok = np.isfinite(old) & np.isfinite(new)
    dis = float(np.abs(old[ok] - new[ok]).mean()) if ok.any() else 0.0
    reasons, notes = [], [note] if note else []
    if ok.any() and dis > threshold:
        reasons.append(f"the judge disagrees with its own past rewards: mean |old - new| "
                       f"{dis:.3f} on {int(ok.sum())} re-scored pairs > {threshold:g}")
    failed = int((np.isfinite(old) & ~np.isfinite(new)).sum())
    if failed:
        notes.append(f"{failed} of {len(new)} drift re-scores failed")
    if auc is not None and np.isfinite(auc) and auc < min_auc:
        reasons.append(f"the judge agrees with people at audit AUC {auc:.3f} < {min_auc:g} on "
                       "the audit set")
    if clicks is not None and clicks.gap > threshold:
        reasons.append(f"the judge and the clicks disagree: gap {clicks.gap:.3f} (clicks - "
                       f"judge {clicks.bias:+.3f} on average) on {clicks.pairs} pairs with "
                       f"both > {threshold:g}")
    return DriftCheck(int(ok.sum()), dis, auc, not reasons, "; ".join(reasons),
                      "; ".join(notes), None if clicks is None else clicks.gap,
                      0 if clicks is None else clicks.pairs)


__all__ = ["DriftCheck", "audit_set", "audit_source", "judge_audit", "people_auc", "rescore",
           "sample_audit", "sample_rewards"]
