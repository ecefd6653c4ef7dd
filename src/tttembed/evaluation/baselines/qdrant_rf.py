"""Qdrant's Relevance Feedback Query (naive strategy, Qdrant 1.17) as baseline ``qdrant-rf``.

Reimplemented from the sources, read for this module:

* **Scoring** -- qdrant/qdrant ``lib/segment/src/vector_storage/query/feedback_query.rs``
  (the same file ships in the ``qdrant-edge`` crate): the feedback items are sorted by
  score, descending (a stable sort); the best is paired with the worst, the second best
  with the second worst, ... while ``front < back``, at most ``min(3, n // 2)`` pairs;
  a pair's confidence is ``score(p) - score(n)`` (never negative) and its weight
  ``confidence.powf(b) * c`` (a plain power: no sign handling is needed). A document
  scores ``a * sim(t, d) + sum_pairs weight * (sim(p, d) - sim(n, d))``. With inner
  products this is the inner product of ``d`` with the vector
  ``a * t + sum_pairs weight * (p - n)`` (:func:`feedback_vector`), so the baseline is one
  search of the unchanged index. A weight that is not finite (``0 ** b`` with ``b < 0``:
  Qdrant would give ``inf``) is taken as 0 here.
* **Fitting** -- the PyPI package ``qdrant-relevance-feedback`` 0.1.1:
  ``relevance_feedback.py`` (``RelevanceFeedback.train``, ``prepare_train_data_query``,
  ``prepare_train_data_all_queries``), ``train/train.py`` (``get_context_pairs``,
  ``get_synthetic_queries``, ``split_train_val``, ``train_formula``) and
  ``train/naive_formula.py`` (``NaiveFormula``, ``ranking_loss``). Per training query:
  retrieve ``LIMIT = 50`` documents, score all of them with the feedback model; the context
  pair is the single most confident ordered pair among the top ``CONTEXT_LIMIT = 5``
  (queries without one are dropped); every response from rank 5 on is a training row
  ``(score, confidence, delta = sim(r, p) - sim(r, n), target = feedback(r) - max
  feedback of the top 5)``. Loss: the sum over all pairs of rows of one query with
  ``target_j > target_i`` of ``max(0, s_i - s_j + 0.01)``, ``s = a * score +
  confidence ** b * delta * c``. Adam (lr 0.005, betas 0.9/0.999, eps 1e-8) from
  ``(1, 1, 1)``, full batch, at most 1000 epochs, early stopping after 200 epochs without a
  validation improvement of 1e-6, the best validation parameters kept; the first half of
  the queries trains, the second half validates. The README's usage trains on
  ``amount_of_queries = 200`` synthetic queries: random documents of the collection.
  The package's torch code is reimplemented in numpy (float64 parameters; the package
  keeps them float32) with the analytic gradient.
* Docs: https://qdrant.tech/documentation/tutorials-search-engineering/using-relevance-feedback

**Fitting source.** ``synthetic`` (the package's default, for scorers that judge any text):
``SYNTHETIC_QUERIES`` random corpus documents (``default_rng(seed)``) are the queries;
their vector is the document's stored vector (what a symmetric embedder's query encoder
gives; the package embeds the text with the query encoder) and their text the document
text; their top 50 are scored by the evaluation's scorer. ``crossfit`` (label scorers:
``qrels``, ``noisy-qrels`` have no judgment for a document used as a query): the task's
evaluated queries are split into halves A and B by ``default_rng(seed)``; the package's
procedure with real queries (its ``queries=`` argument) fits on A's queries (their base
top 50, scored by the scorer: scorer outputs only) and is applied to B, and vice versa, so
no query is ever in its own fit. Each half uses at most ``SYNTHETIC_QUERIES`` queries.
The fitting cost is the scored pairs (``50`` per fitting query), reported apart from the
budget ``B``: the coefficients are fitted once per (task, retriever, scorer), as Qdrant
fits them once per (collection, retriever, feedback model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tttembed.adapt.feedback import (  # noqa: F401  (re-exported: the baseline's formula)
    MAX_PAIRS,
    Coef,
    feedback_pairs,
    feedback_vector,
    pair_weight,
)
from tttembed.adapt.qdrant_fit import (  # noqa: F401  (re-exported: the package's fit)
    CONTEXT_LIMIT,
    EPOCHS,
    INIT,
    LR,
    MARGIN,
    MIN_DELTA,
    PATIENCE,
    Batch,
    Fit,
    Rows,
    context_pair,
    fit_coefficients,
    query_rows,
    ranking_loss,
)

if TYPE_CHECKING:
    from tttembed.evaluation.workload import TaskData

LIMIT = 50
SYNTHETIC_QUERIES = 200
SEED = 0
#: Bump when the fit changes for the same inputs (it keys the cached fits and cells).
FIT_VERSION = 1

#: ``judge(task, query_text, doc_ids)`` -> rewards of a free-text query (synthetic fit).
TextScores = Callable[[str, str, list[str]], np.ndarray]


# --- the formula ----------------------------------------------------------------------

def naive_score(target: np.ndarray, items: np.ndarray, scores: Sequence[float], coef: Coef,
                doc: np.ndarray) -> float:
    """Qdrant's ``score_by`` for one document, term by term (the reference)."""
    a, b, c = coef
    sim = lambda u: float(np.dot(np.asarray(u, np.float64), np.asarray(doc, np.float64)))  # noqa: E731
    score = a * sim(target)
    for p, q, conf in feedback_pairs(scores):
        score += pair_weight(conf, b, c) * (sim(items[p]) - sim(items[q]))
    return score


# --- fitting a task ---------------------------------------------------------------------

@dataclass(frozen=True)
class TaskFit:
    """A task's coefficients: ``all`` (synthetic) or ``A`` / ``B`` (cross-fit: fitted on
    that half, applied to the other)."""

    source: str
    fits: Mapping[str, Fit]
    pairs: int
    halves: Mapping[str, str] = field(default_factory=dict, repr=False)

    def coef_for(self, key: str) -> Coef:
        if self.source == "synthetic":
            return self.fits["all"].coef
        return self.fits["B" if self.halves[key] == "A" else "A"].coef

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "pairs": self.pairs,
                "fits": {h: {"a": f.coef[0], "b": f.coef[1], "c": f.coef[2],
                             "fitted": f.fitted, "epochs": f.epochs,
                             "train_queries": f.train_queries, "val_queries": f.val_queries,
                             "val_loss_start": f.loss_start, "val_loss_best": f.loss_best}
                         for h, f in self.fits.items()}}


def halves(keys: Sequence[str], seed: int = SEED) -> dict[str, str]:
    """Query key -> ``A`` / ``B``: a seeded permutation, A the first ``ceil(n / 2)``."""
    perm = np.random.default_rng(seed).permutation(len(keys))
    cut = (len(keys) + 1) // 2
    return {keys[int(i)]: ("A" if j < cut else "B") for j, i in enumerate(perm)}


def _crossfit(td: TaskData, rewards_for: Callable[[list], Mapping], seed: int) -> TaskFit:
    keys = td.queries.keys
    half = halves(keys, seed)
    perm = np.random.default_rng(seed).permutation(len(keys))
    fits: dict[str, Fit] = {}
    pairs = 0
    for h in ("A", "B"):
        idx = [int(i) for i in perm if half[keys[int(i)]] == h][:SYNTHETIC_QUERIES]
        idx = [i for i in idx if int((td.base.rows[i] >= 0).sum()) >= LIMIT]
        asked = [(keys[i], td.index.doc_ids[r]) for i in idx for r in td.base.rows[i, :LIMIT]]
        got = rewards_for(asked) if asked else {}
        pairs += len(asked)
        rows = []
        for i in idx:
            fb = np.array([got[keys[i]][td.index.doc_ids[r]] for r in td.base.rows[i, :LIMIT]])
            r = query_rows(td.base.scores[i, :LIMIT], fb,
                           td.index.get_vectors(td.base.rows[i, :LIMIT]))
            if r is not None:
                rows.append(r)
        fits[h] = fit_coefficients(rows)
    return TaskFit("crossfit", fits, pairs, half)


def _synthetic(td: TaskData, judge: TextScores, seed: int) -> TaskFit:
    from tttembed.data.beir import doc_text

    n = len(td.index.doc_ids)
    picks = np.random.default_rng(seed).choice(n, size=min(SYNTHETIC_QUERIES, n), replace=False)
    vectors = td.index.get_vectors(picks)
    scores, found = td.index.search(vectors, LIMIT)
    rows, pairs = [], 0
    for j, doc in enumerate(picks.tolist()):
        ok = found[j] >= 0
        if int(ok.sum()) < LIMIT:
            continue
        ids = [td.index.doc_ids[r] for r in found[j]]
        fb = np.asarray(judge(td.name, doc_text(td.corpus[td.index.doc_ids[doc]]), ids),
                        dtype=np.float64)
        pairs += len(ids)
        r = query_rows(scores[j], fb, td.index.get_vectors(found[j]))
        if r is not None:
            rows.append(r)
    return TaskFit("synthetic", {"all": fit_coefficients(rows)}, pairs)


def fit_task(td: TaskData, rewards_for: Callable[[list], Mapping], judge: TextScores | None,
             seed: int = SEED) -> TaskFit:
    """Synthetic document-queries when ``judge`` is given, else the cross-fit."""
    return _synthetic(td, judge, seed) if judge is not None else _crossfit(td, rewards_for, seed)


# --- cached form (a table of numbers, stored like a metrics cell) ----------------------

_FIELDS = ("a", "b", "c", "fitted", "epochs", "train_queries", "val_queries",
           "val_loss_start", "val_loss_best")


def to_numbers(fit: TaskFit) -> dict[str, float]:
    out: dict[str, float] = {"synthetic": float(fit.source == "synthetic"),
                             "pairs": float(fit.pairs)}
    for h, f in fit.summary()["fits"].items():
        for k in _FIELDS:
            x = float(f[k])
            out[f"{h}.{k}"] = x if math.isfinite(x) else -1.0
    return out


def from_numbers(got: Mapping[str, float], keys: Sequence[str], seed: int = SEED) -> TaskFit:
    source = "synthetic" if got["synthetic"] else "crossfit"
    names = ("all",) if source == "synthetic" else ("A", "B")
    fits = {h: Fit((got[f"{h}.a"], got[f"{h}.b"], got[f"{h}.c"]), bool(got[f"{h}.fitted"]),
                   int(got[f"{h}.epochs"]), int(got[f"{h}.train_queries"]),
                   int(got[f"{h}.val_queries"]), got[f"{h}.val_loss_start"],
                   got[f"{h}.val_loss_best"]) for h in names}
    return TaskFit(source, fits, int(got["pairs"]),
                   halves(keys, seed) if source == "crossfit" else {})
