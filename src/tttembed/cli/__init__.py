"""The ``tttembed`` command line. One module per command group, joined here.

Commands parse arguments and print; all the work is ``tttembed.api``. Importing this
package stays light (no torch), so ``tttembed --help`` starts fast. The option scheme is
in ``cli/_options.py``; old spellings are hidden aliases for one release (``ALIASES``).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from tttembed._version import __version__
from tttembed.cli import chain
from tttembed.cli.compare import compare_command
from tttembed.cli.demo import demo
from tttembed.cli.eval import eval_command
from tttembed.cli.index import index
from tttembed.cli.inspect import index_show, state_app
from tttembed.cli.learn import learn, rerank
from tttembed.cli.loop import loop
from tttembed.cli.pairs import app as pairs_app
from tttembed.cli.search import search
from tttembed.cli.serve import serve
from tttembed.cli.states import states_app
from tttembed.cli.store import app as store_app

#: command -> {old spelling: new spelling, or None for "now the positional argument"}
ALIASES: dict[str, dict[str, str | None]] = {
    "search": {"--queries": None, "-q": None, "-s": "--state"},
    "learn": {"--queries": None, "-q": None},
    "rerank": {"--queries": None, "-q": None},
    "eval": {"--tasks": None, "-t": None, "--scopes": "--scope", "--budgets": "--budget",
             "--report": "--out"},
    "serve": {"--queries": "--query-source"},
    "chain search": {"-q": "--quiet", "--adapter": "--encoder"},
    "chain train": {"-q": "--quiet"},
    "chain eval": {"-q": "--quiet"},
}


def rewrite_aliases(args: list[str]) -> list[str]:
    """Old option spellings -> the current ones, with a note on stderr for each (the root
    options in front, ``--threads N``, are not the command)."""
    rest = args[2:] if args[:1] == ["--threads"] else args
    words = [a for a in rest if not a.startswith("-")]
    command = " ".join(words[:2]) if words[:1] == ["chain"] else (words[0] if words else "")
    table = ALIASES.get(command, {})
    out: list[str] = []
    for arg in args:
        name, eq, value = arg.partition("=")
        if name not in table:
            out.append(arg)
            continue
        new = table[name]
        print(f"note: {name} is an old spelling; use "
              f"{new or 'the positional argument'} ({command} --help)", file=sys.stderr)
        if new is not None:
            out.append(new + eq + value)
        elif eq:
            out.append(value)
    return out


#: On/off flag pairs: given both at once, a usage error, never "the last one wins".
OPPOSITES = (("--ignore-identical-ids", "--keep-identical-ids"),)


def contradiction(args: list[str]) -> str | None:
    """The one-line usage error of a line that gives both flags of a pair, or None."""
    words = args[:args.index("--")] if "--" in args else args
    for on, off in OPPOSITES:
        if on in words and off in words:
            return (f"{on} and {off} contradict each other: give one of them (or neither: "
                    "the data decides)")
    return None


def _refuse_contradiction(args: list[str]) -> None:
    """Exit 2 with one line on stderr (and ``{"error": ...}`` on stdout with --json)."""
    message = contradiction(args)
    if message is None:
        return
    if "--json" in args:
        from tttembed.cli._common import emit_json

        emit_json({"error": message})
    print(f"Error: {message}", file=sys.stderr)
    sys.exit(2)


class AliasGroup(TyperGroup):
    def main(self, args: Any = None, *a: Any, **kw: Any) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        if args[:2] == ["index", "show"]:  # `index` builds; `index show X` inspects
            args = ["index-show", *args[2:]]
        args = rewrite_aliases(hoist_threads(args))
        _refuse_contradiction(args)
        if "--json" not in args or not kw.pop("standalone_mode", True):
            return super().main(args, *a, **kw)
        return _json_main(super().main, args, *a, **kw)


def _json_main(run: Any, args: list[str], *a: Any, **kw: Any) -> Any:
    """A ``--json`` line: a usage error (an unknown option, a bad value) is also one JSON
    document on stdout, ``{"error": ...}``, beside click's message on stderr."""
    from tttembed.cli._common import emit_json, is_usage_error, json_written

    before = json_written()
    try:
        code = run(args, *a, standalone_mode=False, **kw)
    except typer.Abort:
        if json_written() == before:
            emit_json({"error": "aborted"})
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        if not is_usage_error(exc):
            raise
        usage: Any = exc  # one of typer's click exceptions (format_message, show)
        if json_written() == before:
            emit_json({"error": usage.format_message()})
        usage.show()
        sys.exit(usage.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def hoist_threads(args: list[str]) -> list[str]:
    """``--threads N`` anywhere on the line is the root option (every command runs models
    under the same policy): moved in front of the command."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--threads" and i + 1 < len(out):
            value = out[i + 1]
            del out[i:i + 2]
            return ["--threads", value, *out]
        if arg.startswith("--threads="):
            del out[i]
            return [arg, *out]
    return out


app = typer.Typer(
    name="tttembed",
    help="Make a frozen embedding retriever better after deployment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no markup eaten, flags as flags, defaults whole
    add_completion=False,
    cls=AliasGroup,
)
app.command()(index)
app.command()(search)
app.command()(learn)
app.command()(rerank)
app.command()(demo)
app.command("eval")(eval_command)
app.command()(serve)
app.command("compare")(compare_command)
app.command("index-show", hidden=True)(index_show)
app.add_typer(state_app, name="state")
app.command()(loop)
app.add_typer(states_app, name="states")
app.add_typer(chain.app, name="chain")
app.add_typer(pairs_app, name="pairs")
app.add_typer(store_app, name="store")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tttembed {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit."),
          threads: Optional[int] = typer.Option(
              None, "--threads", min=1, help="CPU threads of every torch model (embedders, "
              "chain encoder, rerankers); may follow the command too. Default: "
              "$TTTEMBED_THREADS, else the CPUs no other process keeps busy, re-measured as "
              "the load changes.")) -> None:
    """Make a frozen embedding retriever better after deployment."""
    if threads is not None:
        import os

        from tttembed.core.devices import THREADS_ENV

        os.environ[THREADS_ENV] = str(threads)  # the policy reads it (and Ray workers inherit it)


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # stdout closed outside a command (``--help | head -1``)
        from tttembed.cli._common import quiet_pipe_exit

        sys.exit(quiet_pipe_exit().exit_code)
