"""Ranking metrics over BEIR dicts: nDCG@k, Recall@k, MRR@k, P@k, MAP (pure; inputs never
mutated).

Contracts: qrels ``{qid: {doc_id: grade}}`` (integer grades), run ``{qid: {doc_id: score}}``.

Definitions (trec_eval's, so that numbers compare with published tables):

* **Ranking.** A query's run is ordered by score, descending; ties are broken by doc id,
  descending (string comparison), exactly as trec_eval does (``form_res_rels.c`` sorts by
  score, then ``strcmp`` of docnos in reverse). pytrec_eval keeps that rule; ranx and other
  toolkits may order ties differently, so cross-checks use distinct scores.
* **nDCG@k** is trec_eval's ``ndcg_cut.k``: gain = the grade (linear; grades <= 0 give no
  gain), discount ``1 / log2(rank + 1)``, ideal DCG@k from all judged grades of the query.
* **Recall@k**: relevant = grade >= 1; share of the relevant documents in the top k.
* **MRR@k**: ``1 / rank`` of the first relevant document within the top k, else 0
  (``recip_rank``: no cut-off).
* **P@k** is trec_eval's ``P_k``: relevant documents in the top k, divided by k.
* **MAP@k** is trec_eval's ``map_cut_k`` (``map``: no cut-off): the mean, over the
  query's relevant documents, of the precision at the rank of each one found within k.
* **Names**: ``ndcg@10``, ``recall@100``, ``mrr@10``, ``p@10``, ``map@100``, ``map``, or
  trec_eval's (``ndcg_cut_10``, ``ndcg_cut.10``, ``recall_100``, ``P_10``,
  ``map_cut_100``, ``map``, ``recip_rank``); results keep the name asked.
* **Which queries count**: the queries of qrels with at least one grade >= 1. A query
  missing from the run (or with an empty run) scores 0. Run queries absent from qrels are
  ignored.

Only the ranks of judged, positively graded documents matter for these metrics, so the
implementation computes those ranks per query (a sort of the query's scores) and then
aggregates every metric with vectorised numpy over all queries at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.types import Qrels, Run

METRIC_NAMES = ("ndcg", "recall", "mrr", "p", "map")
#: trec_eval's metric names -> ours (``NAME_k`` / ``NAME.k`` carry the cut-off).
TREC_NAMES = {"ndcg_cut": "ndcg", "recall": "recall", "p": "p", "map_cut": "map"}
#: Metrics without a cut-off: the whole run counts.
NO_CUTOFF = {"map": "map", "recip_rank": "mrr"}
UNCUT = 10**9
DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr@10")

__all__ = [
    "drop_identical",
    "DEFAULT_METRICS",
    "METRIC_NAMES",
    "run_metrics",
    "per_query_metric",
    "per_query_metrics",
    "evaluated_queries",
    "mean_metric",
    "mrr_at_k",
    "ndcg_at_k",
    "parse_metric",
    "recall_at_k",
]


def drop_identical(run: Run) -> dict[str, dict[str, float]]:
    """The run without any document whose id is its query's id (BEIR's
    ``ignore_identical_ids``: ArguAna's query arguments are also in its corpus)."""
    return {q: {d: s for d, s in docs.items() if d != q} for q, docs in run.items()}


def evaluated_queries(qrels: Qrels) -> list[str]:
    """Query ids that count: those of ``qrels`` with at least one grade >= 1, in qrels order."""
    return [qid for qid, judged in qrels.items() if any(g >= 1 for g in judged.values())]


class _Ranked:
    """Flat arrays for the evaluated queries (one entry per judged document with gain > 0)."""

    def __init__(self, qrels: Qrels, run: Run) -> None:
        self.qids = evaluated_queries(qrels)
        q_idx: list[int] = []
        ranks: list[int] = []
        gains: list[float] = []
        ideal_q: list[int] = []
        ideal_g: list[float] = []
        n_rel = np.zeros(len(self.qids), dtype=np.float64)
        for qi, qid in enumerate(self.qids):
            judged = qrels[qid]
            positive = [(d, float(g)) for d, g in judged.items() if g > 0]
            n_rel[qi] = sum(1 for _, g in positive if g >= 1)
            ideal_q.extend([qi] * len(positive))
            ideal_g.extend(g for _, g in positive)
            run_q = run.get(qid)
            if not run_q:
                continue
            hits = [(d, g) for d, g in positive if d in run_q]
            if not hits:
                continue
            q_ranks = _ranks_of(qid, run_q, [d for d, _ in hits])
            q_idx.extend([qi] * len(hits))
            ranks.extend(q_ranks)
            gains.extend(g for _, g in hits)
        self.n = len(self.qids)
        self.q_idx = np.asarray(q_idx, dtype=np.int64)
        self.ranks = np.asarray(ranks, dtype=np.float64)
        self.gains = np.asarray(gains, dtype=np.float64)
        self.n_rel = n_rel
        # Ideal order: gains descending within each query; position 0-based in its query.
        iq = np.asarray(ideal_q, dtype=np.int64)
        ig = np.asarray(ideal_g, dtype=np.float64)
        order = np.lexsort((-ig, iq))
        self.ideal_q = iq[order]
        self.ideal_g = ig[order]
        starts = np.searchsorted(self.ideal_q, np.arange(self.n))
        self.ideal_pos = np.arange(len(self.ideal_q)) - starts[self.ideal_q]

    def ndcg(self, k: int) -> np.ndarray:
        keep = self.ranks <= k
        dcg = np.bincount(
            self.q_idx[keep],
            weights=self.gains[keep] / np.log2(self.ranks[keep] + 1.0),
            minlength=self.n,
        )
        top = self.ideal_pos < k
        idcg = np.bincount(
            self.ideal_q[top],
            weights=self.ideal_g[top] / np.log2(self.ideal_pos[top] + 2.0),
            minlength=self.n,
        )
        return np.divide(dcg, idcg, out=np.zeros(self.n), where=idcg > 0)

    def recall(self, k: int) -> np.ndarray:
        hit = (self.ranks <= k) & (self.gains >= 1)
        found = np.bincount(self.q_idx[hit], minlength=self.n).astype(np.float64)
        return np.divide(found, self.n_rel, out=np.zeros(self.n), where=self.n_rel > 0)

    def mrr(self, k: int) -> np.ndarray:
        first = np.full(self.n, np.inf)
        rel = self.gains >= 1
        np.minimum.at(first, self.q_idx[rel], self.ranks[rel])
        return np.where(first <= k, 1.0 / first, 0.0)

    def p(self, k: int) -> np.ndarray:
        hit = (self.ranks <= k) & (self.gains >= 1)
        return np.bincount(self.q_idx[hit], minlength=self.n).astype(np.float64) / k

    def map(self, k: int) -> np.ndarray:
        rel = (self.ranks <= k) & (self.gains >= 1)
        q, r = self.q_idx[rel], self.ranks[rel]
        order = np.lexsort((r, q))
        q, r = q[order], r[order]
        first = np.searchsorted(q, np.arange(self.n))
        found = np.arange(len(q)) - first[q] + 1.0  # relevant documents up to this rank
        total = np.bincount(q, weights=found / r, minlength=self.n)
        return np.divide(total, self.n_rel, out=np.zeros(self.n), where=self.n_rel > 0)

    def per_query(self, name: str, k: int) -> dict[str, float]:
        values = getattr(self, name)(k)
        return dict(zip(self.qids, values.tolist()))


def _ranks_of(qid: str, run_q: Mapping[str, float], docs: Sequence[str]) -> list[int]:
    """1-based ranks of ``docs`` (all in ``run_q``) under score desc, then doc id desc."""
    scores = np.fromiter(run_q.values(), dtype=np.float64, count=len(run_q))
    if np.isnan(scores).any():
        raise DataError(f"run for query {qid!r} has NaN scores; give every document a number")
    scores.sort()
    target = np.fromiter((run_q[d] for d in docs), dtype=np.float64, count=len(docs))
    right = np.searchsorted(scores, target, side="right")
    left = np.searchsorted(scores, target, side="left")
    ranks = (len(scores) - right + 1).tolist()
    for j in np.flatnonzero(right - left > 1).tolist():  # ties: rare with float scores
        s, d = target[j], docs[j]
        ranks[j] += sum(1 for other, v in run_q.items() if v == s and other > d)
    return ranks


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"cutoff k must be a positive integer, got {k!r}")
    return int(k)


def ndcg_at_k(qrels: Qrels, run: Run, k: int) -> dict[str, float]:
    """Per-query nDCG@k (trec_eval ``ndcg_cut``) over the evaluated queries."""
    return _Ranked(qrels, run).per_query("ndcg", _check_k(k))


def recall_at_k(qrels: Qrels, run: Run, k: int) -> dict[str, float]:
    """Per-query Recall@k (relevant = grade >= 1) over the evaluated queries."""
    return _Ranked(qrels, run).per_query("recall", _check_k(k))


def mrr_at_k(qrels: Qrels, run: Run, k: int) -> dict[str, float]:
    """Per-query reciprocal rank of the first relevant document within the top k."""
    return _Ranked(qrels, run).per_query("mrr", _check_k(k))


def mean_metric(per_query: Mapping[str, float]) -> float:
    """Plain mean over queries; raises DataError when there is no query to average."""
    if not per_query:
        raise DataError(
            "no query to average: qrels have no query with a grade >= 1",
            fix="check that the qrels file matches the queries and has positive grades",
        )
    return float(np.mean(np.fromiter(per_query.values(), dtype=np.float64)))


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``, trec_eval's ``"ndcg_cut_10"`` / ``"P_10"`` /
    ``"map"`` likewise (module docstring); ConfigError for anything else."""
    text = name.strip().lower()
    if text in NO_CUTOFF:
        return NO_CUTOFF[text], UNCUT
    base, sep, cut = text.partition("@")
    if not sep:
        stem, _, cut = text.replace(".", "_").rpartition("_")
        base, sep = TREC_NAMES.get(stem, ""), "_"
    if base not in METRIC_NAMES or not cut.isdigit() or int(cut) < 1:
        known = ", ".join(f"{m}@k" for m in METRIC_NAMES)
        raise ConfigError(f"unknown metric {name!r}; use one of {known} (k a positive "
                          "integer), map, or trec_eval's names (ndcg_cut_10, P_10, "
                          "recall_100, map_cut_100, recip_rank)")
    return base, int(cut)


def per_query_metrics(
    qrels: Qrels, run: Run, metrics: Iterable[str] = DEFAULT_METRICS
) -> dict[str, dict[str, float]]:
    """``{metric name: {qid: value}}`` for every requested metric, ranks computed once."""
    parsed = [(m, *parse_metric(m)) for m in metrics]
    ranked = _Ranked(qrels, run)
    return {m: ranked.per_query(base, k) for m, base, k in parsed}


def run_metrics(qrels: Qrels, run: Run, metrics: Iterable[str] = DEFAULT_METRICS) -> dict[str, float]:
    """``{metric name: mean over the evaluated queries}``."""
    per_query = per_query_metrics(qrels, run, metrics)
    return {m: mean_metric(values) for m, values in per_query.items()}


def per_query_metric(qrels: Qrels, run: Run, metric: str = "ndcg@10") -> dict[str, float]:
    """One metric for each judged query of ``run`` (the input of ``compare``).

        >>> raw = tt.per_query_metric(qrels, result.to_run())
    """
    return per_query_metrics(qrels, run, (metric,))[metric]
