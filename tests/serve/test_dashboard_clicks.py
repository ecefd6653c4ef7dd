"""The dashboard's click panel shows the learner's propensity curve with its band and
basis beside the click-through by position, and the candidate's interleaving test."""

from __future__ import annotations

from tttembed.serve.dashboard import render_dashboard


def test_the_click_panel_shows_the_estimated_curve_and_the_online_test() -> None:
    status = {"clicks": {"events": 3, "clicks": 2,
                         "ctr_by_rank": [{"rank": 1, "impressions": 10, "clicks": 2, "ctr": 0.2},
                                         {"rank": 2, "impressions": 10, "clicks": 0,
                                          "ctr": 0.0}]},
              "propensities": {"theta": [1.0, 0.512], "low": [1.0, 0.401],
                               "high": [1.0, 0.633], "interventions": 140,
                               "method": "harvest"},
              "online_test": {"candidate": "v7", "decision": "undecided", "searches": 41,
                              "wins": 9, "losses": 4, "p": 0.3}}
    page = render_dashboard(status)
    assert "0.512 [0.401, 0.633]" in page and "140 interventions" in page
    assert "candidate v7 under interleaving: undecided after 41 searches" in page
    bare = render_dashboard({"clicks": status["clicks"]})
    assert "0.512" not in bare and "interleaving" not in bare
