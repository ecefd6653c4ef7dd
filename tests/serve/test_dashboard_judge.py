"""The dashboard under ``--judge none`` and its pair counts: "no judge" instead of a red
"judge NOT audited (no --audit)" (``--audit`` is refused without a judge), the validation
pairs a check compared and those the judge was paid for told apart in the same words, and
the click-rewarded pairs shown beside the judged ones."""

from __future__ import annotations

import re
import time

from tttembed.serve.dashboard import render_dashboard


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", fragment)).strip()


def _judge_badge(page: str) -> str:
    match = re.search(r'<span data-field="judge_audited"[^>]*>[^<]*</span>', page)
    assert match, page
    return match.group(0)


VERSION = {"version": "v1", "parent": None, "promoted": True, "served": True,
           "evidence": {"gain": 0.05, "ci_low": 0.01, "ci_high": 0.09, "p": 0.003,
                        "queries": 40, "validation_pairs": 123},
           "pairs": {"judged": 0, "feedback": 2, "validation": 0, "clicks": 57}}


def test_without_a_judge_the_badge_says_no_judge_not_unaudited() -> None:
    page = render_dashboard({"judge_audited": False, "has_judge": False, "version": "v1"})
    badge = _judge_badge(page)
    assert "NOT audited" not in page and "no judge" in _text(badge)
    assert "frozen" not in badge  # not the red badge
    unaudited = _judge_badge(render_dashboard({"judge_audited": False, "has_judge": True}))
    assert "judge NOT audited (no --audit)" in unaudited and "badge frozen" in unaudited


def test_validation_pairs_read_the_same_in_the_evidence_and_the_pair_counts() -> None:
    page = render_dashboard({"version": "v1", "versions": [VERSION]})
    row = _text(re.search(r'<tr data-version="v1".*?</tr>', page, re.S).group(0))
    assert "123 validation pairs, 0 paid" in row
    assert "0 validation paid" in row and " 0 validation ·" not in row
    assert "57 clicks" in row  # the click-rewarded pairs are shown
    assert 'data-field="pairs_clicks" data-value="57"' in page


def test_the_status_says_whether_the_loop_has_a_judge(tmp_path) -> None:
    from tttembed.loop.status import LoopState, beat, loop_status, write_status
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "reg", create=True)
    write_status(reg.root, LoopState(has_judge=False, updated=str(time.time())))
    beat(reg.root)
    assert loop_status(reg, None)["has_judge"] is False
    write_status(reg.root, LoopState())
    assert loop_status(reg, None)["has_judge"] is True
