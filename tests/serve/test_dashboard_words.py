"""What the dashboard's words say agrees with itself (trust round 5): the learner's activity
is one badge (never "not learning" beside "busy"), and a version without an interval says
why it has none (not "fewer than 2 queries" beside 87 queries)."""

from __future__ import annotations

import html
import re

import pytest

from tttembed.serve.dashboard import render_dashboard


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)).strip())


def _status(**kw) -> dict:
    return {"version": None, "versions": [], "learner": {"running": True}, **kw}


@pytest.mark.parametrize(("fields", "said"), [
    ({"learning": True, "idle": False}, "learning a new version"),
    ({"learning": False, "idle": True}, "idle"),
    ({"learning": False, "idle": False, "pending": 12}, "judging: 12 pairs pending"),
    ({"learning": False, "idle": False, "pending": 0}, "working"),
])
def test_the_learners_activity_is_one_badge(fields, said):
    page = render_dashboard(_status(**fields))
    badge = re.search(r'<span data-field="learning"[^>]*>([^<]*)</span>', page)
    assert badge and badge.group(1) == said, page[:2000]
    text = _text(page)
    assert "not learning" not in text and "busy" not in text
    # both fields stay readable as data
    assert f'data-field="idle" data-value="{str(fields["idle"]).lower()}"' in page


def test_a_stopped_learner_reads_as_stopped_not_as_busy():
    page = render_dashboard(_status(learning=False, idle=False,
                                    learner={"running": False, "stopped": "killed"}))
    assert re.search(r'data-field="learning"[^>]*>learner not running<', page)


def _version(**evidence) -> dict:
    return {"version": "v2", "created": "2026-12-01T18:00:00Z", "parent": "v1",
            "promoted": False, "served": False, "reason": "refused",
            "evidence": {"gain": 0.0, "ci_low": None, "ci_high": None, "p": 1.0,
                         "validation_pairs": 0, **evidence}}


@pytest.mark.parametrize(("evidence", "said"), [
    ({"queries": 87, "changed": 0, "left_out": 5},
     "(no interval: none of the 5 queries whose top-10 changes was judged)"),
    ({"queries": 87, "changed": 0, "left_out": 0},
     "(no interval: no query's top-10 changes)"),
    ({"queries": 1, "changed": 1, "left_out": 0}, "(no interval with fewer than 2 queries)"),
])
def test_a_version_without_an_interval_says_why(evidence, said):
    page = render_dashboard(_status(versions=[_version(**evidence)]))
    text = _text(page)
    assert said in text, text
    if evidence["queries"] >= 2:
        assert "fewer than 2 queries" not in text
