"""Two populations, judged apart: the promotion check on both kinds of question a version
serves (issue 62).

- **asked**: the rewarded texts, in-sample (:func:`tttembed.loop.promote.check_promotion`):
  the candidate's query part serves exactly these texts.
- **new**: the same rewarded questions, each held out by text from the learning of the
  candidate's shared part (:data:`FOLDS` folds by a hash of the text,
  :func:`tttembed.ttt.judged.text_folds`; the shared part re-learned on the other folds
  with the method and alpha auto chose, :func:`oof_shared`), against the served
  version's shared part as a question nobody asked sees it (its query keys never match
  a new text). This is what a question nobody asked gets. The served version's shared
  part was learned on earlier rewards, some of them these questions: in-sample for it,
  so the comparison leans towards the served version.

One pre-declared paired test per population (the paired bootstrap of
:func:`tttembed.ttt.judged.paired_test`), each at :data:`ALPHA_EACH` = 0.025: two tests,
Bonferroni, so noise alone promotes a candidate no better on either with probability at
most 0.05. A candidate is promoted only when neither test says worse at 0.025 and at
least one says better at 0.025 (:func:`decide`). When the candidate's shared part is not
shown better for new questions than the served one (each step's loss too small to refuse
piled up over a live hour: 0.6451 -> 0.6151 on SciFact's held-back questions), or it has
none where the served version has one, the served shared part (raw when it has none) is
kept under the candidate's query part (:func:`compose`): the
query part serves the asked texts, the shared part everything else; that composite is what
is checked and registered, so a shared part that helps new questions is never dropped
because a query part looks better in-sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tttembed.adapt.state import AdaptState
from tttembed.index.base import Index
from tttembed.loop.clicks.feed import ClickView, clicks_note
from tttembed.loop.promote import (
    ALPHA,
    MIN_QUERIES,
    PromotionCheck,
    adapted,
    check_lists,
    check_promotion,
    verdict,
)
from tttembed.ttt.judged import Pair, Pay, text_folds
from tttembed.ttt.queries import BaseRetrieval, QuerySet
from tttembed.types import Rewards

#: Each population's test level: two pre-declared tests, Bonferroni (family-wise 0.05).
ALPHA_EACH = ALPHA / 2
#: Folds of the held-out-by-text estimate for new questions.
FOLDS = 2
#: A text no one asked: its query keys match no query part (the shared part's view).
NOBODY = "\x00a question nobody asked"
#: The shared methods re-learned out of fold.
RELEARNED = ("global", "task", "adapter")


def shared_view(x: np.ndarray, tasks: Sequence[str], states: Sequence[AdaptState]
                ) -> np.ndarray:
    """``x`` as ``states`` serve a question nobody asked (their shared parts only)."""
    return adapted(x, [NOBODY] * len(tasks), tasks, states)


def is_query_key(key: str) -> bool:
    return "/#" in key


def has_shared(states: Sequence[AdaptState]) -> bool:
    return any(not is_query_key(k) for st in states for k in st.keys)


def oof_shared(index: Index, qs: QuerySet, base: BaseRetrieval,
               rewards: Mapping[str, Mapping[str, float]], state: AdaptState | None,
               *, seed: int = 0) -> np.ndarray:
    """Each rewarded question's vector under the candidate's shared part re-learned
    without its text's fold (its task's shared method and alpha as auto chose them; raw
    where auto chose raw). A shared method this cannot re-learn keeps the candidate's own
    part (in-sample), as its view of a new text."""
    from tttembed.ttt.distil import learn_state
    from tttembed.ttt.options import LearnOptions

    sel = (state.selection or {}) if state is not None else {}
    shared, alphas = dict(sel.get("shared") or {}), dict(sel.get("shared_alpha") or {})
    out = shared_view(base.x, qs.tasks, [state] if state is not None else [])
    fold = text_folds(qs.texts, FOLDS)
    for f in range(FOLDS):
        test, train = np.flatnonzero(fold == f), np.flatnonzero(fold != f)
        if not len(test) or not len(train):
            continue
        sub = qs.subset(train.tolist())
        sub_base = BaseRetrieval(x=base.x[train], rows=base.rows[train],
                                 scores=base.scores[train])
        rw = {k: rewards[k] for k in sub.keys if k in rewards}
        for method in sorted({m for m in shared.values() if m in RELEARNED}):
            rows = [int(i) for i in test if shared.get(qs.tasks[i]) == method]
            if not rows:
                continue
            labels = {alphas.get(qs.tasks[i], "rule") for i in rows}
            alpha: str | float = labels.pop() if len(labels) == 1 else "rule"
            opts = LearnOptions(scope=method, seed=seed,
                                alpha=alpha if alpha == "rule" else float(alpha))
            st = learn_state([(sub, sub_base, index)], rw, opts)
            tasks = [qs.tasks[i] for i in rows]
            out[rows] = shared_view(base.x[rows], tasks, [st]) if st is not None \
                else base.x[rows]
    return out


def compose(candidate: AdaptState, served: Sequence[AdaptState]) -> AdaptState | None:
    """The candidate's query part over the served version's shared part (the query part
    alone when the served version has none: new questions get raw), one mixed state;
    None when either holds low-rank maps or neighbour rows (not composed)."""
    if len(candidate.parts.adapter_rows) or len(candidate.parts.neighbour_rows):
        return None
    mine = _rows(candidate, [g for g, k in enumerate(candidate.keys) if is_query_key(k)])
    if not has_shared(served):
        return _mixed(candidate, mine) if mine[0] else None
    donor = served[0] if len(served) == 1 else None
    if donor is None or donor.scope not in ("mixed", "task") or donor.dim != candidate.dim:
        return None
    if len(donor.parts.adapter_rows) or len(donor.parts.neighbour_rows):
        return None
    return _mixed(candidate, mine,
                  _rows(donor, [g for g, k in enumerate(donor.keys) if not is_query_key(k)]))


_Rows = tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]


def _rows(state: AdaptState, picked: list[int]) -> _Rows:
    """``state``'s keys, vectors, alphas and counts at ``picked``."""
    return (tuple(state.keys[g] for g in picked), state.vectors[picked], state.alpha[picked],
            state.n_g[picked])


def _mixed(candidate: AdaptState, *parts: _Rows) -> AdaptState:
    """``candidate`` holding ``parts``' rows, in order, as one mixed state."""
    return replace(candidate, scope="mixed", query_ids=(),
                   keys=tuple(k for p in parts for k in p[0]),
                   vectors=np.concatenate([p[1] for p in parts]),
                   alpha=np.concatenate([p[2] for p in parts]),
                   n_g=np.concatenate([p[3] for p in parts]))


@dataclass(frozen=True)
class TwoChecks:
    """The candidate against the served version on the asked and on new questions;
    ``kept_shared``: the served version whose shared part the candidate keeps, "raw"
    where the served version has none (new questions stay at raw), '' when the
    candidate's own shared part is taken."""

    asked: PromotionCheck
    new: PromotionCheck
    kept_shared: str = ""
    #: what the asked check judges on when not the rewards learned from ('' they are)
    split: str = ""
    #: where ``kept_shared``: why the candidate's own shared part was not taken (its own
    #: new-questions figures, or that it had none)
    own_shared: str = ""

    def as_dict(self) -> dict[str, Any]:
        def one(c: PromotionCheck, what: str) -> dict[str, Any]:
            return {"gain": c.gain, "ci_low": c.ci_low, "ci_high": c.ci_high, "p": c.p,
                    "queries": c.queries, "changed": c.changed,
                    "validation_pairs": c.validation_pairs, "what": what}

        return {"alpha_each": ALPHA_EACH, "tests": 2,
                "multiplicity": "two pre-declared paired tests (asked, new), each at 0.025: "
                                "Bonferroni, family-wise 0.05",
                "asked": one(self.asked, self.split or "the rewarded texts, in-sample"),
                "new": one(self.new, f"the rewarded questions held out by text from the "
                                     f"shared part's learning ({FOLDS} folds)"),
                "kept_shared": self.kept_shared, "own_shared": self.own_shared}


@dataclass(frozen=True)
class NewSet:
    """The questions the new check runs on when not the asked ones: their query set, base
    vectors and what each is judged by."""

    qs: QuerySet
    x: np.ndarray
    judged: Mapping[str, Mapping[str, float]]


def _over(judged: Mapping[str, Mapping[str, float]], seen: Mapping[str, Mapping[str, float]]
          ) -> dict[str, dict[str, float]]:
    """``judged`` with what ``seen`` holds (the asked check's purchases) over it."""
    return {k: {**judged.get(k, {}), **seen.get(k, {})} for k in {*judged, *seen}}


def check_two(index: Index, qs: QuerySet, x: np.ndarray,
          judged: Mapping[str, Mapping[str, float]],
          served: Sequence[AdaptState], state: AdaptState | None, new_x: np.ndarray,
          pay: Pay, *, cap: Callable[[], int], seed: int = 0,
          min_queries: int = MIN_QUERIES,
          reach: int = 0, parent: str | None = None, split: str = "",
          new_pay: Pay | None = None, new_cap: int | None = None,
          new_on: NewSet | None = None) -> tuple[AdaptState | None, TwoChecks]:
    """Both populations' checks of ``state`` (``new_x``: its shared part's view of each
    rewarded question held out by text, :func:`oof_shared`) against ``served``; when
    its shared part changes new questions' lists without being shown better for them
    (at :data:`ALPHA_EACH`), or it has none where ``served`` has one, the composite
    (:func:`compose`) and its checks instead: the shared part moves only on evidence, so
    losses too small to refuse one at a time cannot pile up over many promotions. ``cap()``: the
    validation pairs a check may pay now; ``new_pay``: what values the documents the
    new-questions check brings in when not ``pay`` (the loop's unseen floor where its
    rewards are click rates, :class:`tttembed.loop.nojudge.FloorOrPay`): it then judges
    by ``judged`` alone, not by what the asked check paid the judge for, and nothing it
    values is kept for the asked check; ``new_cap``: the new check's cap when not
    ``cap()`` (a ``new_pay`` that pays nothing needs none); ``new_on``: the questions the
    new check runs on when not ``qs`` (the shared set: :mod:`tttembed.loop.shared_set`;
    ``new_x`` then one row per question of it). Returns the state to register and its
    checks."""
    seen = {k: dict(v) for k, v in judged.items()}

    def paying(pairs: list[Pair]) -> Rewards:
        got = pay(pairs)
        for k, d in got.items():
            seen.setdefault(k, {}).update(d)
        return got

    candidate = [state] if state is not None and len(state.keys) else []
    asked = check_promotion(index, qs, x, seen, served, candidate, paying, cap=cap(),
                            seed=seed, min_queries=min_queries, reach=reach)
    nq, nx = (new_on.qs, new_on.x) if new_on is not None else (qs, x)
    seen_new = seen if new_on is None else _over(new_on.judged, seen)
    view = shared_view(nx, nq.tasks, served)
    new = check_lists(index, nq, view, new_x, seen_new if new_pay is None else (
                          judged if new_on is None else new_on.judged),
                      paying if new_pay is None else new_pay,
                      cap=cap() if new_cap is None else new_cap, seed=seed + 1,
                      min_queries=min_queries)  # new_pay: not the asked check's purchases
    two = TwoChecks(asked, new, split=split)
    dropped = has_shared(served) and not has_shared(candidate)
    if state is None or not (dropped or (new.changed > 0 and not better(new))):
        return state, two
    composite = compose(state, served)
    if composite is None:
        return state, two
    asked = check_promotion(index, qs, x, seen, served, [composite], paying, cap=cap(),
                            seed=seed, min_queries=min_queries)
    own = "it has none" if dropped else f"its own not shown better: {_one(two.new)}"
    new = check_lists(index, nq, view, view, seen_new, paying, cap=0, min_queries=min_queries)
    kept = parent if parent and has_shared(served) else "raw"
    return composite, TwoChecks(asked, new, kept_shared=kept, split=split, own_shared=own)


def better(c: PromotionCheck) -> bool:
    return c.changed > 0 and c.enough and c.gain > 0 and c.p < ALPHA_EACH


def worse(c: PromotionCheck) -> bool:
    return c.changed > 0 and c.ci_low is not None and c.gain < 0 and c.p < ALPHA_EACH


def _one(c: PromotionCheck) -> str:
    return c.shown() if c.changed or c.left_out else f"no top-10 changes on {c.queries} queries"


def _shown(two: TwoChecks) -> str:
    return f"asked {_one(two.asked)}; new questions {_one(two.new)}"


def _kept_note(two: TwoChecks) -> str:
    """What the candidate keeps for new questions instead of its own shared part ('' when
    it keeps nothing of the served version's)."""
    if not two.kept_shared:
        return ""
    if two.kept_shared == "raw":
        return f" (new questions kept at raw; the candidate's shared part: {two.own_shared})"
    return f" (the shared part of {two.kept_shared} kept; the candidate's: {two.own_shared})"


def _undecided(two: TwoChecks) -> str:
    """Why neither population was found better: not better, or (a check with changes
    short of ``--min-queries``) nothing decided there, with how many more it needs."""
    named = (("asked", two.asked), ("new", two.new))
    short = [(n, c) for n, c in named if c.changed and c.queries < c.min_queries]
    if not short:
        return f"better on neither population at alpha {ALPHA_EACH} each"

    def has(c: PromotionCheck) -> str:
        return (f"{c.queries} rewarded quer{'y' if c.queries == 1 else 'ies'} and needs "
                f"--min-queries {c.min_queries} ({c.min_queries - c.queries} more)")

    if len(short) == 2:
        return (f"nothing decided: the asked check has {has(two.asked)}, the new "
                f"questions' check {has(two.new)}")
    name, c = short[0]
    decided = [n for n, d in named if d.changed and n != name]
    if decided:
        return (f"not better on the {decided[0]} questions at alpha {ALPHA_EACH}, and "
                f"nothing decided on the {name}: it has {has(c)}")
    return f"nothing decided: the {name} check has {has(c)}"


def decide(two: TwoChecks, *, frozen: bool, candidate: Sequence[AdaptState],
           clicks: ClickView | None = None) -> tuple[bool, str]:
    """Promote or not, and why (module docstring): both populations' figures shown; with
    no candidate, why the ``clicks`` could not carry one yet (when they could not)."""
    ok, why = verdict(two.asked, frozen=frozen, candidate=candidate)
    if not candidate:
        return False, why + clicks_note(clicks)
    if not two.asked.changed and not two.new.changed:
        return False, why
    kept = _kept_note(two)
    for name, c in (("asked", two.asked), ("new", two.new)):
        if worse(c):
            return False, (f"refused: worse on the {name} questions at alpha {ALPHA_EACH} "
                           f"({_shown(two)}){kept}")
    if not (better(two.asked) or better(two.new)):
        return False, f"refused: {_undecided(two)} ({_shown(two)}){kept}"
    if frozen:
        return False, f"refused: promotions are frozen ({_shown(two)}){kept}"
    return True, f"promoted: {_shown(two)}{kept}"


__all__ = ["ALPHA_EACH", "FOLDS", "NOBODY", "NewSet", "TwoChecks", "better", "check_two",
           "compose", "decide",
           "has_shared", "oof_shared", "shared_view", "worse"]
