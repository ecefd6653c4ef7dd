"""The loop's budget under faults (issue 49, section 5): a failing judge spends nothing it
did not get answered, a learner killed with SIGKILL leaves ``pairs_judged`` as the store
counts it, and a PostgreSQL password never reaches the learner's start line."""

from __future__ import annotations

from typer.testing import CliRunner

from tttembed.cli import app


def test_the_loop_start_line_masks_the_registry_password(tmp_path):
    """`tttembed loop --registry postgresql://USER:SECRET@...` prints its "learning into"
    line with the password masked (***), as every other message does."""
    url = "postgresql://tt:S3CRETpw@127.0.0.1:1/tttembed"
    r = CliRunner().invoke(app, ["loop", "--registry", url, "--index",
                                 str(tmp_path / "no-index"), "--judge", "bm25"])
    out = r.output
    assert "learning into postgresql://tt:***@127.0.0.1:1/tttembed" in out, out
    assert "S3CRETpw" not in out, out
