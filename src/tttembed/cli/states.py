"""``tttembed states``: a registry's versions (list / show / promote / add / rollback /
diff; pin / unpin beside the retention commands, :mod:`tttembed.cli.store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import emit_json, handle_errors
from tttembed.cli._options import JsonOpt

states_app = typer.Typer(help="The versions of a state registry.", no_args_is_help=True,
                         add_completion=False, rich_markup_mode=None)
DirArg = Annotated[str, typer.Argument(metavar="REGISTRY", help="The registry: its folder, or postgresql://USER@HOST:PORT/DB.", show_default=False)]
VersionArg = Annotated[str, typer.Argument(metavar="VERSION", help="A version name (v1, v2, ...).", show_default=False)]


def _registry(spec: str) -> Any:
    from tttembed.registry.open import open_registry

    return open_registry(spec)


def _line(v: Any, served: str | None) -> str:
    m = v.manifest
    ev = m.get("evidence") or {}
    lo, hi = ev.get("ci_low"), ev.get("ci_high")
    if m.get("kind") == "chain":
        gain = f"- (chain encoder, {m.get('regime')}, T={m.get('steps')})"
    elif not ev:
        gain = "-"
    elif lo is None or hi is None:
        from tttembed.serve.cells import interval_note

        gain = f"{ev.get('gain', 0):+.4f} {interval_note(ev)}"
    else:
        gain = f"{ev.get('gain', 0):+.4f} [{lo:+.4f}, {hi:+.4f}] p {ev.get('p', 1.0):.3f}"
    mark = "*" if v.name == served else " "
    state = f"promoted by {v.promoted_by or 'user'}" if v.promoted else "not promoted"
    reason = m.get("reason", "")
    if v.promoted and v.promoted_by != "learner":
        reason = f"promoted by {v.promoted_by or 'user'} at {v.promoted_at} (learner: {reason})"
    if v.broken:
        return f"{mark} {v.name:<5} BROKEN: {v.broken}"
    return (f"{mark} {v.name:<5} {m.get('created', ''):<20} parent {m.get('parent') or 'raw':<5} "
            f"{state:<20} delta {gain}  {reason}")


def _budget_line(reg: Any, spec: str) -> str:
    """The loop's two budget figures, labelled (``/v1/loop``'s ``budget``)."""
    from tttembed.loop.coordination import open_coordination
    from tttembed.loop.open import open_store
    from tttembed.loop.status import read_status
    from tttembed.registry.chain import is_chain

    st = read_status(open_coordination(reg))
    paid = f"{st.pairs_judged} of {st.judge_budget}" if st else "none"
    if is_chain(reg.manifest):
        return f"judge pairs paid by this loop: {paid}; {_chain_rewards(st)}"
    root = getattr(reg, "root", None)
    ledger = (f"none (no loop has stored any in {root}: a loop started with --store keeps "
              "its rewards in that store)")
    if root is None or (Path(root) / "loop.sqlite").is_file():
        store = open_store(None, spec)
        try:
            ledger = str(store.counts().get("rewards", 0))
        finally:
            store.close()
    return f"judge pairs paid by this loop: {paid}; rewards in the ledger: {ledger}"


def _chain_rewards(st: Any) -> str:
    """Where a chain registry's rewards are: a chain registry keeps none; its learner's
    are in its --registry (or --store) store, counted there when this machine can open
    it (a folder's loop.sqlite)."""
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import CHAIN_TASK

    where = st.store if st is not None else ""
    if not where:
        return ("chain rewards: none kept in a chain registry (the chain learner, "
                "`tttembed loop --chain`, keeps them in its --registry store: "
                "`tttembed states list STATE_REGISTRY` counts them)")
    if not (Path(where) / "loop.sqlite").is_file():
        return (f"chain rewards: in the chain learner's store {where} (not counted here: "
                f"`tttembed states list {where}` counts every reward there)")
    store = open_store(None, where)
    try:
        n = sum(r.task == CHAIN_TASK for r in store.rewards(trusted_only=False))
    finally:
        store.close()
    return f"chain rewards: {n} in the chain learner's store {where}"


def _replica_line(r: dict[str, Any], served: str | None) -> str:
    """What one replica serves, and the version it refused (never shown as served)."""
    lag = "" if r.get("version") == served else "  (not the registry's version)"
    none = "base (untrained)" if r.get("kind") == "chain" else "raw"
    generation = "" if r.get("generation") is None else f" (generation {r.get('generation')})"
    line = f"replica {r.get('replica')}: serves {r.get('version') or none}{generation}{lag}"
    refused = r.get("refused")
    if isinstance(refused, dict) and refused.get("version"):
        line += f"; REFUSED {refused['version']}: {refused.get('error')}"
    elif r.get("following") is False:
        line += f"; NOT FOLLOWING: {r.get('error')}"
    return line


@states_app.command("list")
@handle_errors
def states_list(folder: DirArg, as_json: JsonOpt = False, history: Annotated[bool, typer.Option("--history", help="Also list every promotion and rollback: when, what, by whom, why.")] = False) -> None:
    """Every version, oldest first; * marks the one the registry serves. Below: what each
    replica reported serving in the last 30 s, and (--history) promotions and rollbacks."""
    from tttembed.loop.coordination import open_coordination
    from tttembed.loop.coordination.base import checked_candidate

    reg = _registry(folder)
    survey = reg.survey()
    coordination = open_coordination(reg)
    served, replicas = survey.served, coordination.replicas()
    candidate, candidate_error = checked_candidate(coordination,
                                                   {v.name for v in survey.versions})
    problems = survey.problems + ([candidate_error] if candidate_error else [])
    if as_json:
        emit_json({"served": served, "problems": problems, "replicas": replicas,
                   "candidate": candidate and candidate["version"],
                   **({"candidate_error": candidate_error} if candidate_error else {}),
                   "history": survey.history, "versions": [
            {**dict(v.manifest), **({"id": v.id} if v.id else {}), "promoted": v.promoted, "promoted_at": v.promoted_at,
             "promoted_by": v.promoted_by, **({"broken": v.broken} if v.broken else {})}
            for v in survey.versions]})
        return
    typer.echo(f"{reg.location}: the registry serves {served or 'raw vectors'}")
    for v in survey.versions:
        typer.echo(_line(v, served))
    typer.echo(_budget_line(reg, folder))
    if candidate is not None:
        typer.echo(f"candidate: {candidate['version']} under an online test (against "
                   f"{candidate.get('against') or 'raw'}, since {candidate.get('since')})")
    elif candidate_error:
        typer.echo(f"candidate: {candidate_error}")
    if replicas:
        for r in replicas:
            typer.echo(_replica_line(r, served))
    else:
        typer.echo("replicas: none reported in the last 30 s")
    if history:
        typer.echo("history:")
        for h in survey.history:
            typer.echo(f"  {h.get('at')}  {h.get('action'):<8} {h.get('from') or 'raw'} -> "
                       f"{h.get('version') or 'raw'}  by {h.get('by')}  {h.get('reason') or ''}")
    if problems:  # what could be read is listed above; the exit says it is not all
        from tttembed.core.errors import DataError

        raise DataError("broken registry file(s): " + "; ".join(problems))


@states_app.command("show")
@handle_errors
def states_show(folder: DirArg, version: VersionArg, as_json: JsonOpt = False) -> None:
    """One version's manifest: parent, pairs, evidence, why promoted or refused."""
    import json

    v = _registry(folder).get(version)
    if as_json:
        emit_json(dict(v.manifest))
        return
    typer.echo(json.dumps(dict(v.manifest), indent=2, sort_keys=True))


@states_app.command("promote")
@handle_errors
def states_promote(folder: DirArg, version: VersionArg) -> None:
    """Serve VERSION now (running servers pick it up within seconds; thaws frozen promotions)."""
    reg = _registry(folder)
    reg.promote(version, by="user", reason="promoted by hand", check=True)
    typer.echo(f"{reg.location}: serving {version} (replicas follow within seconds: "
               f"`tttembed states list {reg.location}` shows what each serves)")


@states_app.command("add")
@handle_errors
def states_add(folder: DirArg, file: Annotated[Path, typer.Argument(metavar="FILE", help="A state learned offline: the vectors.npz `tttembed learn -o` wrote (its .json manifest beside it); or a chain encoder checkpoint folder (`tttembed chain train`), added to a chain registry (made for its index when REGISTRY holds none yet); or base: a chain registry for --index serving the untrained encoder, for `loop --chain` to learn into.", show_default=False)], index: Annotated[Optional[str], typer.Option("--index", help="With FILE base: the passage index the chain registry serves (the one `tttembed chain search --index` built).")] = None) -> None:
    """Register a state learned offline, or a chain encoder, as a new version (checked
    against the registry's embedder, corpus and base model like every version; not
    promoted: `states promote` serves it). The same state added again is said, with the
    version that holds it, and not added twice. `states add FOLDER base --index INDEX`
    makes a chain registry that serves the untrained encoder until one is promoted."""
    from tttembed.registry.open import open_for, open_for_base

    if str(file) == "base":
        reg = open_for_base(folder, index)
        typer.echo(f"{reg.location}: a chain registry for {index}, serving the untrained "
                   f"encoder (base) until a version is promoted (serve it with `tttembed "
                   f"serve --index {index} --chain {reg.location}`; `tttembed loop --chain "
                   f"{reg.location}` learns into it)")
        return
    reg = open_for(folder, file)
    same = reg.added_as(file)
    if same is not None:
        typer.echo(f"{reg.location}: {file} is already {same.name} (the same state, "
                   f"{_added_how(same)}): nothing added (serve it with "
                   f"`tttembed states promote {reg.location} {same.name}`)")
        return
    v = reg.add(file, by="user")
    typer.echo(f"{reg.location}: added {file} as {v.name}, not promoted (serve it with "
               f"`tttembed states promote {reg.location} {v.name}`)")


def _added_how(v: Any) -> str:
    """How a version came in: ``added from PATH`` or ``registered by the learner``."""
    source = v.manifest.get("added_from")
    return f"added from {source}" if source else "registered by the learner"



@states_app.command("rollback")
@handle_errors
def states_rollback(folder: DirArg, version: Annotated[Optional[str], typer.Argument(metavar="[VERSION]", help="The version to serve; default: the one the current version replaced (raw when none).", show_default=False)] = None) -> None:
    """Serve an earlier version (running servers pick it up within seconds)."""
    reg = _registry(folder)
    record = reg.rollback(version, by="user")
    typer.echo(f"{reg.location}: serving {record['served'] or 'raw vectors'}")


@states_app.command("diff")
@handle_errors
def states_diff(folder: DirArg, a: VersionArg, b: VersionArg, as_json: JsonOpt = False) -> None:
    """What changes from version A to version B: keys added, removed, changed (whole
    vectors: per changed key |alpha v difference| and the cosine of the two vectors)."""
    d = _registry(folder).diff(a, b)
    if as_json:
        emit_json(d)
        return
    if d.get("kind") == "chain":
        typer.echo(f"{a} -> {b} (chain encoders): {len(d['changed'])} fields changed")
        for key, c in d["changes"].items():
            typer.echo(f"  ~ {key}: {c['from']} -> {c['to']}")
        typer.echo(f"not compared: {d['not_compared']}")
        return
    typer.echo(f"{a} -> {b}: {len(d['added'])} keys added, {len(d['removed'])} removed, "
               f"{len(d['changed'])} changed, {d['unchanged']} unchanged")
    for name in ("added", "removed"):
        for key in d[name][:20]:
            typer.echo(f"  {name[0]} {key}")
    for key in d["changed"][:20]:
        typer.echo(f"  ~ {key}  {_change(d['changes'][key])}")
    if d.get("not_compared"):
        typer.echo(f"not compared: {d['not_compared']}")


def _change(c: dict[str, Any]) -> str:
    """One changed key of a diff in words (a part that cannot be compared: said so)."""
    delta = "-" if c.get("delta_norm") is None else f"{c['delta_norm']:.4g}"
    cosine = "-" if c.get("cosine") is None else f"{c['cosine']:.4f}"
    line = (f"|delta| {delta}  cosine {cosine}  alpha {c['alpha_from']:.3f} -> "
            f"{c['alpha_to']:.3f}")
    if c.get("dimension"):
        line += f"  dimension {c['dimension']} (vectors not compared)"
    if c.get("map"):
        line += f"  map {c['map']}" + (f" |map delta| {c['map_delta']:.4g}"
                                        if c.get("map_delta") is not None else "")
    return line
