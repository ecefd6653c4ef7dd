"""The hint of a failed HTTP backend names what the command in hand has (trust round 6,
issue 77, g): ``serve``'s 502 on a hung upstream embedder and ``loop --chain``'s
judge-down error said to raise ``--timeout`` / ``--max-retries``, options neither has."""

from __future__ import annotations

import pytest

from tttembed.core.errors import BackendError
from tttembed.core.http import SLOW_HINT, for_command


def _failed() -> BackendError:
    return BackendError(f"POST http://127.0.0.1:9/v1/embeddings failed after 6 attempts; "
                        f"last error: timed out ({SLOW_HINT})")


@pytest.mark.parametrize("command", ["serve", "loop"])
def test_the_hint_names_no_option_the_command_lacks(command):
    import re

    from typer.main import get_command

    from tttembed.cli import app

    said = str(for_command(_failed(), command))
    assert "POST http://127.0.0.1:9/v1/embeddings failed after 6 attempts" in said
    assert "\n" not in said and SLOW_HINT not in said
    options = {o for p in get_command(app).commands[command].params for o in p.opts}
    for flag in re.findall(r"--[a-z][a-z-]+", said):
        assert flag in options, f"{command} has no {flag}: {said}"
    assert "60 s" in said and "210 s" in said  # the fixed bounds it works within


def test_another_error_is_left_as_it_is():
    exc = BackendError("the judge answered 400 (bad request)")
    assert for_command(exc, "serve") is exc
