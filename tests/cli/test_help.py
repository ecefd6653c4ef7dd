"""Every command's help at 80 columns tells the truth: each option's help text appears
whole (no markup eaten: ``'tttembed[ray]'`` stays), every shown default whole, flags as
flags (no value placeholder)."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tttembed.cli import app


def _commands(group, path: tuple[str, ...] = ()):
    if hasattr(group, "commands"):
        for name, sub in group.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, group


COMMANDS = list(_commands(get_command(app)))


def _is_option(param) -> bool:
    """An option, not an argument (typer vendors its own click: no isinstance on click's)."""
    return hasattr(param, "is_flag") and bool(getattr(param, "opts", None))


def _flat(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_shows_every_option_whole(path, command):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert r.exit_code == 0, r.output
    out = _flat(r.output)
    assert max(len(line) for line in r.output.splitlines()) <= 80
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        help_text = getattr(param, "help", None)
        if help_text:
            assert _flat(help_text) in out, (param.name, help_text)
        if _is_option(param) and param.is_flag:
            for line in r.output.splitlines():
                if line.strip().startswith(tuple(param.opts)):
                    assert "<bool>" not in line and "BOOLEAN" not in line, line
        elif _is_option(param) and param.show_default and param.default not in (
                None, (), [], False):
            default = param.default
            shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            assert _flat(f"[default: {shown}") in out or _flat(f"default: {shown}") in out, (
                param.name, shown)


def test_markup_in_help_is_printed_as_written():
    r = CliRunner().invoke(app, ["learn", "--help"], env={"COLUMNS": "80"})
    assert "'tttembed[ray]'" in " ".join(r.output.split()).replace("- ", "-")
