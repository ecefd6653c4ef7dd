"""``tttembed store stats|prune|forget``: what a feedback store holds, retention by hand,
and forgetting one user (the work is :mod:`tttembed.loop.prune` and
:mod:`tttembed.loop.forget`; what is kept and why: :mod:`tttembed.loop.retention`)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import console, emit_json, handle_errors
from tttembed.cli._options import JsonOpt
from tttembed.cli.states import DirArg, states_app

app = typer.Typer(help="The feedback store: what it holds, retention, forgetting a user.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)

StoreArg = Annotated[str, typer.Argument(
    metavar="STORE", show_default=False,
    help="The feedback store: a SQLite file (a registry folder: its loop.sqlite) or a "
         "postgresql://USER@HOST:PORT/DB URL.")]
RegistryStatsOpt = Annotated[Optional[str], typer.Option(
    "--registry", show_default=False,
    help="Also the state registry's versions (a folder or postgresql:// URL): how many, "
         "their bytes; with prune, they are pruned by --keep-versions too.")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Say what would go; delete nothing.")]


def open_existing(spec: str) -> Any:
    """The store ``spec`` names, refused when it is not one (a missing path, a folder
    without loop.sqlite, a SQLite file of something else): never created here."""
    from tttembed.core.errors import ConfigError
    from tttembed.loop.open import open_store

    text = str(spec).strip()
    if "://" in text:
        return open_store(text)
    path = Path(text.removeprefix("sqlite:"))
    if path.is_dir():
        path = path / "loop.sqlite"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: give a feedback store (a registry's "
                          "loop.sqlite, or its postgresql:// URL)")
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with sqlite3.connect(uri, uri=True) as conn:
            tables = {str(r[0]) for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path} is not a SQLite file ({exc}): give a feedback store "
                          "(a registry's loop.sqlite)") from exc
    if "searches" not in tables:
        raise ConfigError(f"{path} is not a feedback store (no searches table; tables: "
                          f"{', '.join(sorted(tables)) or 'none'}): give a registry's "
                          "loop.sqlite")
    return open_store(str(path))


@app.command("stats")
@handle_errors
def stats(store: StoreArg, registry: RegistryStatsOpt = None, as_json: JsonOpt = False) -> None:
    """Rows and bytes per table, the oldest and newest row, the growth over the last
    hour; the rows pruned and forgotten so far; with --registry, the versions."""
    opened = open_existing(store)
    try:
        out = opened.stats().to_dict()
    finally:
        opened.close()
    if registry:
        out["registry"] = _registry_stats(registry)
    if as_json:
        emit_json(out)
        return
    _print_stats(out)


def _registry_stats(spec: str) -> dict[str, Any]:
    from tttembed.registry.open import open_registry

    reg: Any = open_registry(spec)
    try:
        sizes = reg.version_bytes()
        survey = reg.survey()
        return {"registry": reg.location, "versions": len(survey.versions),
                "bytes": int(sum(sizes.values())), "served": survey.served,
                "pinned": reg.pins(),
                "oldest": survey.versions[0].name if survey.versions else None,
                "newest": survey.versions[-1].name if survey.versions else None}
    finally:
        reg.close()


def _print_stats(out: dict[str, Any]) -> None:
    console.print(f"{out['store']}: {_mb(out['bytes'])} in all")
    console.print(f"  {'table':<14}{'rows':>12}{'bytes':>12}{'last hour':>11}  oldest")
    for name, t in out["tables"].items():
        oldest = time.strftime("%Y-%m-%d %H:%M", time.gmtime(t["oldest"])) \
            if t["oldest"] else "-"
        last = "-" if t["rows_last_hour"] is None else str(t["rows_last_hour"])
        size = "-" if t["bytes"] is None else _mb(t["bytes"])
        console.print(f"  {name:<14}{t['rows']:>12,}{size:>12}{last:>11}  {oldest}")
    if out["pruned"]:
        console.print("pruned so far: " + ", ".join(f"{k} {v:,}" for k, v in
                                                     sorted(out["pruned"].items())))
    if out["forgotten"]:
        console.print("forgotten so far: " + ", ".join(f"{k} {v:,}" for k, v in
                                                        sorted(out["forgotten"].items())))
    reg = out.get("registry")
    if reg:
        console.print(f"registry {reg['registry']}: {reg['versions']} versions "
                      f"({reg['oldest']} .. {reg['newest']}), {_mb(reg['bytes'])}, served "
                      f"{reg['served'] or 'raw'}, pinned {', '.join(reg['pinned']) or 'none'}")


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 10_000 else f"{n} B"


@app.command("prune")
@handle_errors
def prune(
    store: StoreArg,
    older_than: Annotated[str, typer.Option(
        "--older-than", help="Delete searches, impressions, interventions and click events "
        "older than this (30s, 5m, 2h, 7d, 1w). Paid judgments, people's labels and click "
        "rewards are never pruned.")] = "7d",
    registry: RegistryStatsOpt = None,
    keep_versions: Annotated[int, typer.Option(
        "--keep-versions", min=2, help="With --registry: the versions kept besides the served "
        "and pinned ones (the newest, the rollback target, then the last promoted, then the "
        "candidates refused within --older-than, as room remains).")] = 20,
    click_settle_s: Annotated[float, typer.Option(
        "--click-settle-s", min=0.0, help="The learner's --click-settle-s: a window shorter "
        "than twice it (plus the look-back) is refused.")] = 300.0,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Prune a store by hand, as the servers and the learner do in the background."""
    from tttembed.loop.retention import Retention

    kept = Retention.parse(older_than, keep_versions)
    kept.check(click_settle_s)
    opened = open_existing(store)
    try:
        report = opened.prune(time.time() - kept.retain_s, batch=kept.batch,
                              dry_run=dry_run).to_dict()
    finally:
        opened.close()
    out: dict[str, Any] = {"store": report, "retention": kept.to_dict()}
    if registry:
        out["registry"] = _prune_registry(registry, kept, dry_run)
    if as_json:
        emit_json(out)
        return
    verb = "would delete" if dry_run else "deleted"
    rows = ", ".join(f"{k} {v:,}" for k, v in report["rows"].items())
    console.print(f"{verb} {report['total']:,} rows older than {kept.to_dict()['retain']} "
                  f"({rows})")
    if registry:
        reg = out["registry"]
        console.print(f"{verb} {len(reg['dropped'])} registry versions "
                      f"({', '.join(reg['dropped']) or 'none'}; {reg['bytes_freed']:,} bytes); "
                      f"{reg['versions_after']} kept")


def _prune_registry(spec: str, kept: Any, dry_run: bool) -> dict[str, Any]:
    from tttembed.registry.open import open_registry
    from tttembed.registry.retention import KeepRule, prune_versions

    reg: Any = open_registry(spec)
    try:
        result = prune_versions(reg, KeepRule(kept.keep_versions, kept.retain_s),
                                dry_run=dry_run)
        return dict(result.to_dict())
    finally:
        reg.close()


@app.command("forget")
@handle_errors
def forget(
    store: StoreArg,
    session: Annotated[Optional[str], typer.Option(
        "--session", show_default=False,
        help="The session id to forget (as /v1/search's and /v1/events' session_id).")] = None,
    client: Annotated[Optional[str], typer.Option(
        "--client", show_default=False,
        help="The client id to forget (as /v1/search's and /v1/events' client_id).")] = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Forget one user: delete their searches, events, impressions and labels; blank
    the text of their questions in the paid judgments kept (digest and reward stay)."""
    from tttembed.core.errors import ConfigError

    opened = open_existing(store)
    try:
        report = opened.forget(session=session, client=client, dry_run=dry_run)
    finally:
        opened.close()
    if not report.found:
        who = f"--session {session}" if session is not None else f"--client {client}"
        raise ConfigError(f"{who}: no search or event of that id is in {store} (nothing "
                          "was deleted; check the id, or it was pruned or forgotten "
                          "already)")
    if as_json:
        emit_json(report.to_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    rows = ", ".join(f"{k} {v:,}" for k, v in report.deleted.items() if v)
    blanked = ", ".join(f"{k} {v:,}" for k, v in report.blanked.items() if v)
    console.print(f"{verb} the {report.by}'s {report.searches} searches ({rows})"
                  + (f"; texts blanked, digests and rewards kept: {blanked}" if blanked
                     else ""))


def _open_registry(spec: str) -> Any:
    from tttembed.registry.open import open_registry

    return open_registry(spec)


# -- pins: `tttembed states pin|unpin` (retention's exception, beside its commands) ------
VersionPinArg = Annotated[str, typer.Argument(
    metavar="VERSION", show_default=False,
    help="The version (v1, v2, ...): retention never drops a pinned version.")]


@states_app.command("pin")
@handle_errors
def states_pin(folder: DirArg, version: VersionPinArg) -> None:
    """Pin VERSION: keep it whatever the retention rule (--keep-versions) says."""
    reg: Any = _open_registry(folder)
    if reg.pin(version):
        console.print(f"{reg.location}: pinned {version} (never dropped; `tttembed states "
                      f"unpin {reg.location} {version}` releases it)")
    else:
        console.print(f"{reg.location}: {version} was pinned already: nothing changed")


@states_app.command("unpin")
@handle_errors
def states_unpin(folder: DirArg, version: VersionPinArg) -> None:
    """Unpin VERSION: the retention rule (--keep-versions) decides on it again."""
    reg: Any = _open_registry(folder)
    if reg.unpin(version):
        console.print(f"{reg.location}: unpinned {version} (retention may drop it when no "
                      "other reason keeps it)")
    else:
        console.print(f"{reg.location}: {version} was not pinned: nothing changed (pinned: "
                      f"{', '.join(reg.pins()) or 'none'})")
