"""What ``tttembed learn`` prints about the state it learned, past its summary: method
auto's choice per task and every method's evidence (:func:`print_selection`, which
``tttembed demo`` prints too) and the reward cross-validation or the guard, with the
alpha used (:func:`print_crossval`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tttembed.cli._common import console


def print_selection(state: Any) -> None:
    """``--method auto``: each task's choice and every method's evidence."""
    from tttembed.ttt.select import Selection

    if not state.selection:
        return
    sel = Selection.from_dict(state.selection)
    table = Table(title=f"method auto: per task, the best estimated gain whose 95% CI is "
                        f"above 0 (nDCG@10 under the judge, judged re-search of the "
                        f"validation pairs: {sel.paid:,} paid, cap {sel.cap:,})")
    for name in ("task", "method", "estimated by", "estimated gain vs raw", "95% CI",
                 "queries", ""):
        table.add_column(name, justify="left" if name in ("task", "method", "estimated by",
                                                           "") else "right")
    for task in sel.evidence:
        chosen = {sel.shared.get(task), sel.query.get(task)}
        for m, e in sel.gains(task).items():
            alpha = sel.evidence[task][m].get("alpha", "rule")
            label = m if alpha == "rule" else f"{m} (alpha {alpha})"
            table.add_row(task, label, estimated_by(m, sel.estimators.get(m, "")),
                          f"{e.gain:+.4f}", f"[{e.ci_low:+.4f}, {e.ci_high:+.4f}]",
                          f"{e.queries:.0f}", "<- chosen" if m in chosen else "")
    console.print(table)
    console.print(f"estimated gain: the mean Delta nDCG@10 under the judge ({state.scorer}) "
                  "of a judged re-search of the validation pairs: held-out rewarded queries "
                  "for the shared parts, the rewarded queries themselves for the query parts "
                  "(in-sample: a query-wise vector serves those texts); not the gain search "
                  "--state measures on labels or on other queries, which may differ")
    for task in sel.shared:
        choice = sel.choice(task)
        above = [m for m, e in sel.gains(task).items() if e.ci_low > 0]  # too few queries
        console.print(f"task {task}: {choice}" + ("" if choice != "raw" else (
            f" (raw kept: {', '.join(above)} shows an interval above 0 on fewer held-out "
            "queries than a choice needs; see the note)" if above else
            " (no method's gain is shown above 0: the state keeps raw vectors)")))
    for note in sel.notes:
        console.print(f"note: {note}")
    if not state.audit:
        console.print(f"note: the validation trusts the judge ({state.scorer}); --audit "
                      "qrels:PATH checks it against a few human-judged queries")


def estimated_by(method: str, estimator: str) -> str:
    """The ``estimated by`` cell of method auto's table, in words: a judged re-search of
    held-out queries (shared parts) or of the rewarded queries (query parts), or the
    judged candidates only (the guard did not run)."""
    from tttembed.ttt.select import QUERY_LEVEL

    if estimator.startswith("judged-diff"):
        who = "rewarded queries" if method in QUERY_LEVEL else "held-out queries"
        return f"re-search, {who}" + (" (sampled)" if estimator.endswith("sampled") else "")
    return {"judged-candidates": "judged candidates only"}.get(estimator, estimator)


def _crossval_title(rec: Any) -> str:
    """The title of the cross-validation table: the guard's or the judged candidates'."""
    cv = rec.evidence
    if rec.method == "judged-diff":
        held = ("rewarded queries (a query-wise state serves them)" if cv.scope == "query"
                else "held-out queries")
        return (f"guard: {cv.folds} folds, {cv.queries} {held} re-searched raw and adapted, "
                f"{cv.metric} under the judge (raw {cv.raw:.4f}); validation pairs "
                f"{rec.paid:,} (cap {rec.cap:,})")
    unit = "candidates of each query" if cv.scope == "query" else "rewarded queries"
    return (f"reward cross-validation: {cv.folds} folds over {unit}, {cv.queries} queries "
            f"scored, {cv.metric} vs rewards (raw {cv.raw:.4f})")


def print_crossval(state: Any) -> None:
    """The reward cross-validation: gain of each alpha over raw on held-out rewarded
    candidates; a warning when the alpha used is estimated to lose."""
    from tttembed.adapt.crossval import MIN_CHOICE_QUERIES, too_few_note
    from tttembed.ttt.guard import CrossvalRecord

    if state.crossval is None:
        return
    rec = CrossvalRecord.from_dict(state.crossval)
    cv = rec.evidence
    if not cv.queries:
        console.print("reward cross-validation: too few rewarded queries with distinct "
                      "rewards to hold any out" + (" (alpha auto: 0, the raw vectors)"
                                                   if state.alpha_asked == "auto" else ""))
        return
    table = Table(title=_crossval_title(rec))
    for name in ("alpha", "gain vs raw", "95% CI", ""):
        table.add_column(name, justify="left" if name in ("alpha", "") else "right")
    for g in cv.gains:
        mark = "<- used" if g.alpha == state.alpha_chosen else (
            "<- auto" if g.alpha == cv.auto() else "")
        table.add_row(g.alpha, f"{g.gain:+.4f}", f"[{g.ci_low:+.4f}, {g.ci_high:+.4f}]", mark)
    console.print(table)
    if ";" in state.alpha_chosen:
        console.print(f"alpha auto per task, each on its own held-out queries (the table "
                      f"pools them): {state.alpha_chosen} (0: raw for that task)")
    if rec.note:
        console.print(f"note: {rec.note}")
    if state.alpha_asked == "auto" and cv.queries < MIN_CHOICE_QUERIES:
        console.print(f"note: {too_few_note(cv.queries, 'alpha auto keeps 0, the raw vectors')}")
    if rec.fallback:
        console.print(f"note: the guard did not run ({rec.fallback}): alpha auto was "
                      "chosen by the judged-candidates estimate above, which cannot see "
                      "documents a re-search brings in")
    if state.alpha_asked == "auto" and not state.audit:
        console.print(f"note: the guard trusts the judge ({state.scorer}); a judge that is "
                      "systematically wrong looks like a gain to it (--audit qrels:PATH "
                      "checks it against a few human-judged queries)")
    used = next((g for g in cv.gains if g.alpha == state.alpha_chosen), None)
    if used is not None and used.gain < 0:
        sure = " (its 95% CI is below 0)" if used.ci_high < 0 else ""
        console.print(f"warning: cross-validation estimates that alpha {state.alpha_chosen} "
                      f"makes the ranking of held-out rewarded candidates worse than the raw "
                      f"vectors ({used.gain:+.4f}){sure}; consider --alpha auto "
                      f"(it picks {cv.auto()})", style="bold yellow")
