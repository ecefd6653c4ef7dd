"""Learning a state: the one definition, used by ``tttembed learn``, the Python API and
the evaluation harness.

Data flow: queries -> base vectors and top-K candidates (the unchanged index) -> the
reward plan -> rewards through the ledger (pairs paid once, ever) -> the reward table ->
``adapt.learn_vectors`` for one scope -> AdaptState (:mod:`tttembed.ttt.distil`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tttembed.adapt import STEPS, AdaptState
from tttembed.adapt.adapter import check_rank
from tttembed.adapt.crossval import FOLDS
from tttembed.core.errors import ConfigError, DataError
from tttembed.core.progress import Progress, stage
from tttembed.embed.base import Embedder
from tttembed.execute.config import ExecutorLike
from tttembed.index.base import Index
from tttembed.score.base import Scorer
from tttembed.ttt.active import active_pairs
from tttembed.ttt.audit import MIN_AUC, audit_judge
from tttembed.ttt.corpus import CorpusArg
from tttembed.ttt.distil import learn_auto, learn_state
from tttembed.ttt.judged import Pay, Source, scorer_pay
from tttembed.ttt.options import LearnOptions, Provenance
from tttembed.ttt.queries import Queries, QuerySet, as_query_set, base_retrieval
from tttembed.ttt.rewards import (
    Corpus,
    RewardPlan,
    Rewards,
    candidate_depth,
    corpus_for_index,
    count_in_ledger,
    make_plan,
    score_plan_pairs,
)
from tttembed.ttt.sanity import check_judge


@dataclass(frozen=True)
class LearnOutcome:
    """A state (None when nothing was learned), its plan, rewards and pair counts."""

    state: AdaptState | None
    plan: RewardPlan
    rewards: Rewards = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def pair_counts(scorer: Scorer, plan: RewardPlan, rewards: Rewards) -> dict[str, int]:
    """requested / cached (served from the ledger) / paid / missing pairs of one run:
    ``missing`` counts every pair of the plan with no reward, those the ledger held
    without a score too (``missing_in_ledger``, when any: a rerun with --retry-missing
    asks for them again)."""
    missing = sum(1 for r in rewards.values() for v in r.values() if not np.isfinite(v))
    counts = getattr(scorer, "counts", None)
    if counts is not None:
        c = counts()
        held = max(0, missing - c.missing)
        return {"requested": len(plan.pairs), "cached": c.cached, "paid": c.paid,
                "missing": max(missing, c.missing),
                **({"missing_in_ledger": held} if held else {})}
    return {"requested": len(plan.pairs), "cached": 0, "paid": len(plan.pairs),
            "missing": missing}


def learn_outcome(index: Index, embedder: Embedder, queries: QuerySet, corpus: Corpus,
                  scorer: Scorer, options: LearnOptions = LearnOptions(), *,
                  progress: Progress | None = None) -> LearnOutcome:
    """Plan, score (through the ledger) and learn one state as ``options`` say
    (:class:`~tttembed.ttt.options.LearnOptions`). Unless ``folds`` is 0, a
    ``folds``-fold reward cross-validation is run and kept in the state
    (``state.crossval``); ``alpha`` as for :func:`learn_state` (``auto`` needs folds).
    ``auto`` is chosen by the guard (:mod:`tttembed.ttt.guard`), whose validation pairs
    are capped at ``validate_budget`` per query (default a tenth of ``budget``; past it a
    random sample of the documents to judge is paid, with a note).
    ``method="auto"`` learns the mixed state of :func:`learn_auto` instead of ``scope``'s;
    ``allocation="active"``, the plan's size in pairs chosen by :func:`active_pairs`.
    Before learning, the judge's rewards are checked against the base ranking
    (:mod:`tttembed.ttt.sanity`): one that prefers the bottom of the lists is refused
    unless ``trust_judge``."""
    o = options
    if o.budget <= 0 and not o.dry_run:  # before any work
        _nothing_planned(o.budget, len(queries))
    if o.scope == "adapter" and o.method == "scope":
        check_rank(o.rank, index.dim)
    k = candidate_depth(o.budget, o.depth, len(index))
    base = base_retrieval(index, embedder, queries, k,
                          progress=stage(progress, "encoding queries", len(queries)))
    plan = make_plan(queries, base, index, o.budget, o.depth, o.seed)
    if not plan.pairs and not o.dry_run:
        _nothing_planned(o.budget, len(queries))
    if o.dry_run:  # an active plan's ledger share is unknown until the judge answers
        return LearnOutcome(state=None, plan=plan if o.allocation == "active" else
                            count_in_ledger(plan, queries, corpus, scorer),
                            counts=_validation_plan(o, len(queries), plan))
    pay = scorer_pay(queries, corpus, scorer)
    checked = None if o.audit is None else audit_judge(
        o.audit, queries, pay, min_auc=o.audit_min_auc, seed=o.seed,
        candidates=base.candidates(index, queries.keys))
    plan, rewards = _paid(plan, o.allocation, (queries, base, index), corpus, scorer, pay,
                          o.seed, progress)
    counts = pair_counts(scorer, plan, rewards)
    check_usable(rewards, scorer)
    check_judge(rewards, base.candidates(index, queries.keys), trust=o.trust_judge,
                spec=getattr(scorer, "spec", str(scorer)))
    step = stage(progress, "optimising" + (" and cross-validating" if o.folds else ""),
                 STEPS * (2 if o.folds else 1))
    cap = None if o.validate_budget is None else round(len(queries) * o.validate_budget)
    made = Provenance(scorer=getattr(scorer, "identity", None) or scorer.spec,
                      reward_mapping=scorer.mapping, budget=len(plan.pairs))
    if o.method == "auto":
        state = learn_auto([(queries, base, index)], rewards, pay, objective=o.objective,
                           folds=o.folds, seed=o.seed, validate_cap=cap, provenance=made)
    else:
        state = learn_state([(queries, base, index)], rewards, o, crossval=o.folds > 0,
                            callback=lambda _: step(1), pay=pay, validate_cap=cap,
                            provenance=made)
    if state is not None:
        paid = (state.selection or state.crossval or {}).get("validation_pairs_paid")
        state = replace(state, pairs=counts if paid is None else {**counts, "validation": paid},
                        audit=None if checked is None else checked.as_dict())
    return LearnOutcome(state=state, plan=plan, rewards=rewards, counts=counts)


def _validation_plan(options: LearnOptions, queries: int, plan: RewardPlan
                     ) -> dict[str, int]:
    """A dry run's validation pairs (``--method auto`` / ``--alpha auto``): at most."""
    if not options.validates:
        return {}
    return {"validation_cap": validation_cap(queries, len(plan.pairs),
                                             options.validate_budget)}


def _nothing_planned(budget: float, queries: int) -> None:
    raise ConfigError(f"a budget of {budget:g} rewards per query plans no pair to score "
                      f"({queries} queries): there is nothing to learn from; give --budget "
                      "above 0 (--dry-run shows what a budget costs)")


def validation_cap(queries: int, pairs: int, validate_budget: float | None) -> int:
    """The most validation pairs ``--alpha auto`` / ``--method auto`` pay beyond the plan:
    ``validate_budget`` per query, else a tenth of the rewarded pairs (the guard's rule)."""
    from tttembed.ttt.guard import VALIDATE_SHARE

    return round(queries * validate_budget if validate_budget is not None
                 else VALIDATE_SHARE * pairs)


def check_usable(rewards: Mapping[str, Mapping[str, float]], scorer: Scorer) -> None:
    """Refuse rewards that carry no signal: no rewarded query got two different finite
    rewards (every pair missing, or every reward equal, e.g. judgments whose ids match
    none of the candidates). A state learned from them would only be noise."""
    values = [v for r in rewards.values() for v in r.values() if np.isfinite(v)]
    if any(len({v for v in r.values() if np.isfinite(v)}) > 1 for r in rewards.values()):
        return
    spec = getattr(scorer, "spec", str(scorer))
    missing = sum(len(r) for r in rewards.values()) - len(values)
    retry = ("the ledger keeps a pair with no score as missing and never asks again "
             "unless you rerun with --retry-missing")
    if not values:
        why = f"every one of the {missing} pairs is missing (no usable score)"
        fix = f"check the scorer (its answers, its URL), then rerun: {retry}"
    else:
        same = len(set(values)) == 1
        why = (f"all {len(values)} rewards are {values[0]:g}" if same else
               f"each query's rewards are all equal ({len(values)} rewards)")
        fix = ("check that the judgments' query and document ids are those of the queries "
               "and the corpus, or raise --budget so that a query gets several candidates")
        if missing:
            why += f"; {missing} more pairs are missing"
            fix += f"; {retry}"
    raise DataError(f"scorer {spec}: no query received two different rewards ({why}): "
                    "there is nothing to learn from", fix=fix)


def planned_state(index: Index, outcome: LearnOutcome, options: LearnOptions) -> AdaptState:
    """The state of a learn that produced no vector (a dry run, or nothing rewarded): no
    vector, its pair counts (``requested / in_ledger / to_pay`` for a dry run) and the
    plan's size as its budget."""
    plan = outcome.plan
    dry_run = options.dry_run
    pairs = ({"requested": len(plan.pairs), "in_ledger": plan.in_ledger or 0,
              "to_pay": plan.to_pay, **outcome.counts} if dry_run else outcome.counts)
    return AdaptState(options.scope, (), np.zeros((0, index.dim), np.float32), np.zeros(0),
                      np.zeros(0, np.int64), identity=index.identity, dim=index.dim,
                      objective=options.objective, pairs=pairs, dry_run=dry_run,
                      budget=len(plan.pairs))


def _paid(plan: RewardPlan, allocation: str, source: Source, corpus: Corpus, scorer: Scorer,
          pay: Pay, seed: int, progress: Progress | None) -> tuple[RewardPlan, Rewards]:
    """The plan's pairs and their rewards: the fixed plan scored, or the active one."""
    queries, base, index = source
    if allocation == "active":
        pairs, rewards = active_pairs(queries, base, index, len(plan.pairs), pay, seed)
        return replace(plan, pairs=pairs), rewards
    return plan, score_plan_pairs(plan.pairs, queries, corpus, scorer,
                             progress=stage(progress, "scoring pairs", len(plan.pairs)))


def learn(index: Index, queries: Queries, *, scorer: Scorer | str, scope: str = "task",
          budget: float = 10, task: str | Sequence[str] | None = None,
          objective: str = "kd", dry_run: bool = False, split: str = "test", depth: int = 10,
          seed: int = 0, embedder: Embedder | None = None, corpus: CorpusArg | None = None,
          alpha: str | float = "rule", folds: int = FOLDS, progress: Progress | None = None,
          executor: ExecutorLike = "local", validate_budget: float | None = None,
          audit: str | None = None, audit_min_auc: float = MIN_AUC, method: str = "scope",
          allocation: str = "waterfill", trust_judge: bool = False, rank: int = 8,
          ignore_identical_ids: bool | None = None) -> AdaptState:
    """Spend ``budget`` rewards per query (on average) on the top candidates of
    ``queries``, paid once through the ledger, and learn one ``scope``'s state;
    ``allocation="active"``: the pairs chosen in rounds (:mod:`tttembed.adapt.active`).
    The settings build one :class:`~tttembed.ttt.options.LearnOptions` (checked there,
    each documented there), then :func:`learn_with` learns.

    ``executor="ray"`` (or :class:`~tttembed.execute.config.Ray` ``(address, actors,
    gpus)``) runs the model work on Ray Data: the query vectors not yet cached (a local
    embedder), and the pairs not yet in the ledger of a local-model scorer
    (``cross-encoder:``, ``qwen3-reranker:``), every result committed to the same cache
    and ledger (a rerun pays nothing). HTTP scorers (``rerank:``, ``llm:``) and ``qrels``
    are scored in this process, with a logged note (:mod:`tttembed.execute.score`).

    ``alpha``: ``"rule"`` (``n_g / (n_g + 1)``, the default), a fixed number in [0, 1], or
    ``"auto"``: of {0, 0.1, 0.2, 0.3, 0.5, 0.7, rule}, 0 unless an alpha's 95% interval of
    gain lies above 0, measured by the guard (:mod:`tttembed.ttt.guard`: queries
    re-searched, their never-judged top-10 documents paid, at most ``validate_budget``
    per query, default ``budget / 10``); the evidence is in ``state.crossval``.

    ``audit="qrels:PATH"`` (human judgments of a few of the queries) checks the judge first:
    its rewards on those pairs must agree with people at ROC AUC >= ``audit_min_auc``,
    else nothing is learned (a DataError); the result is kept in ``state.audit``.

    ``method="auto"``: per task the deployable state the same validation says helps
    (:mod:`tttembed.ttt.select`; ``scope`` ignored), one ``mixed`` state whose choice and
    evidence are in ``state.selection``; ``"scope"`` (default): ``scope``'s state.

    ``ignore_identical_ids``: leave each query's own document (same id) out of its
    candidates and re-searches, as :func:`tttembed.ttt.search.search` (None: as the task
    says; ``task="arguana"`` applies it to a query file).

    ``state.pairs`` reports requested / cached (served from the ledger) / paid / missing
    pairs. With ``dry_run`` nothing is scored: the state holds no vector, and
    ``state.pairs`` says requested / in_ledger / to_pay.

        >>> state = tt.learn(index, "data/scifact", scorer="bm25", scope="task", budget=10)
        >>> state.pairs
        {'requested': 3000, 'cached': 0, 'paid': 3000, 'missing': 0}
    """
    options = LearnOptions(scope=scope, method=method, alpha=alpha, objective=objective,
                           budget=budget, depth=depth, folds=folds,
                           validate_budget=validate_budget, audit=audit,
                           audit_min_auc=audit_min_auc, allocation=allocation,
                           trust_judge=trust_judge, seed=seed, rank=rank, dry_run=dry_run)
    return learn_with(index, queries, options, scorer=scorer, task=task, split=split,
                      embedder=embedder, corpus=corpus, executor=executor, progress=progress,
                      ignore_identical_ids=ignore_identical_ids)


def learn_with(index: Index, queries: Queries | QuerySet, options: LearnOptions, *,
               scorer: Scorer | str, task: str | Sequence[str] | None = None, split: str = "test",
               embedder: Embedder | None = None, corpus: CorpusArg | None = None,
               executor: ExecutorLike = "local", progress: Progress | None = None,
               ignore_identical_ids: bool | None = None) -> AdaptState:
    """:func:`learn` with its settings already one :class:`LearnOptions` (what ``tttembed
    learn`` builds from its flags): the queries (``task``, ``split``,
    ``ignore_identical_ids`` as for :func:`learn`; a QuerySet as it is), the index's
    corpus and embedder, the scorer (made ready on ``executor``), then
    :func:`learn_outcome`."""
    from tttembed.execute import prepare
    from tttembed.index.embedder import index_embedder
    from tttembed.ttt.scorer import scorer_for

    qs = as_query_set(queries, task, split, ignore_identical_ids, index)
    docs = corpus_for_index(index, corpus, qs.folder)
    sc = scorer_for(scorer, index, docs)
    emb = index_embedder(index, embedder)
    prepare(sc, executor, embedder=emb, texts=() if options.dry_run else qs.texts)
    outcome = learn_outcome(index, emb, qs, docs, sc, options, progress=progress)
    if outcome.state is not None:
        return outcome.state
    return planned_state(index, outcome, options)


__all__ = ["LearnOutcome", "learn", "learn_outcome", "learn_with",
           "pair_counts", "planned_state"]
