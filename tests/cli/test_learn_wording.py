"""What learn --method auto and the demo print, read by a newcomer: the estimated gain says
what it estimates where it is printed; the demo's next steps do not suggest the judge the
README says the audit refuses."""

from __future__ import annotations

from types import SimpleNamespace

from tttembed.cli._common import console


def _selection() -> dict:
    ev = {"task": {"gain": -0.07, "ci_low": -0.11, "ci_high": -0.03, "p": 0.01, "queries": 70},
          "query": {"gain": 0.31, "ci_low": 0.19, "ci_high": 0.38, "p": 0.001, "queries": 70}}
    return {"shared": {"demo": "raw"}, "query": {"demo": "query"}, "evidence": {"demo": ev},
            "estimators": {"task": "judged-diff", "query": "judged-diff-sampled"},
            "validation_pairs_needed": 900, "validation_pairs_paid": 87, "validation_cap": 87}


def test_the_estimated_gain_says_what_it_estimates_where_it_is_printed():
    """The +0.31 of the table is an estimate under the judge on a judged re-search of the
    validation pairs (held-out queries for shared parts, the rewarded queries themselves for
    query parts), not the gain search measures on labels: said in the title, the column
    and a note."""
    from tttembed.cli.learn_report import print_selection

    state = SimpleNamespace(selection=_selection(), audit=None, scorer="qrels:x")
    with console.capture() as cap:
        print_selection(state)
    out = " ".join(cap.get().split())
    assert "estimated gain" in out
    assert "judged re-search of the validation pairs" in out
    assert "held-out rewarded queries" in out and "the rewarded queries themselves" in out
    assert "re-search, held-out queries" in out and "re-search, rewarded queries" in out
    assert "not the gain search --state measures" in out


def test_the_demo_next_steps_do_not_suggest_a_judge_the_audit_refuses():
    """The README says the audit refuses BM25 on the demo; the demo's next steps learn with
    a judge that passes its audit (people's labels) and show BM25 only as the audited
    example that is refused."""
    from tttembed.cli.demo import next_steps

    text = next_steps()
    commands = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("tttembed ")]
    assert "--scorer bm25" not in text and "--judge bm25" not in text, text
    learn = [ln for ln in commands if ln.startswith("tttembed learn")]
    assert learn and all("--audit qrels:" in ln for ln in learn), text
    assert "BM25 fails that audit" in text
    from typer.main import get_command

    from tttembed.cli import app, rewrite_aliases

    for line in commands:  # every hint names a real command and only real options
        args = rewrite_aliases(line.split()[1:])
        command = get_command(app)
        while hasattr(command, "commands") and args and args[0] in command.commands:
            command = command.commands[args.pop(0)]
        assert not hasattr(command, "commands"), line
        command.make_context(command.name or "", list(args))  # raises on a wrong option
