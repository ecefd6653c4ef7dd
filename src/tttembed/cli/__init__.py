"""The ``tttembed`` command line. One module per command group, joined here.

Importing this package must stay light: commands import torch, transformers and the
backends inside their bodies, so ``tttembed --help`` starts fast.
"""

from __future__ import annotations

import typer

from tttembed import __version__
from tttembed.cli import chain
from tttembed.cli.demo import demo
from tttembed.cli.eval import eval_command
from tttembed.cli.index import index
from tttembed.cli.learn import learn, rerank
from tttembed.cli.search import search

app = typer.Typer(
    name="tttembed",
    help="Make a frozen embedding retriever better after deployment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(index)
app.command()(search)
app.command()(learn)
app.command()(rerank)
app.command()(demo)
app.command("eval")(eval_command)
app.add_typer(chain.app, name="chain")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tttembed {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    """Make a frozen embedding retriever better after deployment."""


def main() -> None:
    app()
