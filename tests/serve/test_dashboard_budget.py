"""The dashboard's budget card says what audits cost (issue 49): the pairs paid for
audits against their cap, the share of the budget that is, and that re-reading the
audit set from the ledger is free."""

from __future__ import annotations

from tttembed.serve.dashboard import render_dashboard


def test_the_budget_card_says_what_audits_cost():
    status = {"pairs_judged": 1210, "judge_budget": 2000, "judge_budget_left": 790,
              "budget": {"audit_share": 0.2, "audit_cap": 400, "audit_pairs": 372}}
    page = render_dashboard(status)
    assert "audits: 372 of 400 pairs (0.2 of the budget" in page, page
    assert "re-read from the ledger is free" in page


def test_the_budget_card_without_audit_figures_says_nothing_of_them():
    page = render_dashboard({"pairs_judged": 3, "judge_budget": 10})
    assert "audits:" not in page
