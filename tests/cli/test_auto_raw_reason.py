"""Method auto's reason line agrees with its table (issue 64, trust round 5): raw kept
although a method shows an interval above 0 (too few held-out queries for a choice) is
said so, not "no method's gain is shown above 0"."""

from __future__ import annotations

from types import SimpleNamespace


def _printed(capsys, evidence: dict) -> str:
    from tttembed.cli.learn_report import print_selection
    from tttembed.ttt.select import Selection

    sel = Selection(shared={"t": "raw"}, query={"t": "none"}, evidence={"t": evidence},
                    estimators={}, needed=0, paid=0, cap=0)
    print_selection(SimpleNamespace(selection=sel.as_dict(), scorer="s", audit="qrels:x"))
    return " ".join(capsys.readouterr().out.split())


def test_raw_kept_with_an_interval_above_0_says_why(capsys):
    out = _printed(capsys, {"adapter": {"gain": 0.0506, "ci_low": 0.004, "ci_high": 0.1293,
                                        "p": 0.06, "queries": 4}})
    assert "task t: raw (raw kept: adapter shows an interval above 0 on fewer" in out, out
    assert "no method's gain is shown above 0" not in out, out


def test_raw_kept_with_no_interval_above_0(capsys):
    out = _printed(capsys, {"task": {"gain": -0.01, "ci_low": -0.03, "ci_high": 0.01,
                                     "p": 0.4, "queries": 30}})
    assert "task t: raw (no method's gain is shown above 0" in out, out
