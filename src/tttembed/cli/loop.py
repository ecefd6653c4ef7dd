"""``tttembed loop`` (the learner alone, beside N serve replicas) and ``tttembed states``
(the registry's versions: list / show / promote / rollback / diff)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import emit_json, handle_errors, quiet_libraries
from tttembed.cli._options import JsonOpt

RegistryOpt = Annotated[str, typer.Option("--registry", help="The state registry: a folder (created when absent: versions, served.json, the learner's loop.json and, by default, the feedback store loop.sqlite) or postgresql://USER@HOST:PORT/DB (versions, the served pointer, the learner's record and, by default, the feedback store in that database; PG* variables read as psycopg reads them).")]
RegistryCacheOpt = Annotated[Optional[Path], typer.Option("--registry-cache", help="With a postgresql:// registry: this machine's local copy of the versions it served (read-only, each checked against its id; a replica started while the database is down serves the version it served last). Default: $TTTEMBED_CACHE_DIR/registry/<database>.")]
JudgeOpt = Annotated[str, typer.Option("--judge", help="Scorer spec of the background judge (rerank:MODEL@URL, llm:MODEL@URL, qwen3-reranker:PATH, cross-encoder:PATH, bm25). Judges that read judgments by query id (qrels:, noisy-qrels:) cannot score live traffic. none: no judge, learn from clicks (POST /v1/events) and labels only, paying nothing.")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="Feedback store shared by the replicas: postgresql://USER@HOST/DB for several, or a SQLite path; default: loop.sqlite in the registry.")]
JudgeBudgetOpt = Annotated[int, typer.Option("--judge-budget", min=0, help="Judge pairs to pay in total (served pairs, validation and drift re-scores; pairs the ledger already holds are free).")]
JudgeRpmOpt = Annotated[float, typer.Option("--judge-rpm", min=0.001, help="Most judge pairs a minute.")]
LearnEveryOpt = Annotated[int, typer.Option("--learn-every", min=1, help="New rewarded pairs between learning cycles (a cycle also runs when the judge has nothing left to do).")]
LoopScopeOpt = Annotated[str, typer.Option("--scope", help="Comma-separated parts a version may use: query (query-wise, by the query's text), task, global.")]
LoopCorpusOpt = Annotated[Optional[Path], typer.Option("--corpus", help="The documents' texts (BEIR folder or corpus.jsonl) for the judge, and on `serve` for the document fields /v1/search returns when asked (\"include\": text, title); default: the index's source.")]
AuditOpt = Annotated[Optional[str], typer.Option("--audit", help="qrels:FOLDER (a BEIR folder) or qrels:FOLDER/qrels/SPLIT.tsv of people's judgments: each cycle the judge's AUC on them is measured (scored once through the reward ledger, within --audit-share) and a low one freezes promotions. Without it the judge is unaudited (a warning, and judge_audited: false in /v1/loop).")]
JudgeDepthOpt = Annotated[int, typer.Option("--judge-depth", min=1, help="Served ranks the judge considers per query.")]
LoopDepthOpt = Annotated[int, typer.Option("--depth", min=1, help="Base-retrieval candidates per rewarded query when learning.")]
DriftSampleOpt = Annotated[int, typer.Option("--drift-sample", min=0, help="Past judge pairs (and, with --audit, audit pairs) re-scored afresh each learning cycle by the drift audit, within --audit-share.")]
DriftThresholdOpt = Annotated[float, typer.Option("--drift-threshold", min=0.0, max=1.0, help="Mean |old - new| reward above which promotions freeze.")]
AuditMinAucOpt = Annotated[float, typer.Option("--audit-min-auc", min=0.0, max=1.0, help="With --audit: the lowest AUC against people before promotions freeze.")]
ClicksOpt = Annotated[str, typer.Option("--clicks", help="How clicks (POST /v1/events) become rewards: ips (debiased for position by propensities estimated from the traffic; with a judge, combined doubly robustly), naive (the raw click-through rate, for comparison only: it rewards whatever is on top), or off.")]
ClickSettleOpt = Annotated[float, typer.Option("--click-settle-s", min=0.0, help="Seconds after a search before its clicks are read (later clicks of it are not counted).")]
LoopInterleaveOpt = Annotated[float, typer.Option("--interleave", min=0.0, max=1.0, help="Interleaving as the online promotion test: a version the offline check does not refuse becomes the registry's candidate, which serve --interleave P replicas interleave with the served version on P of searches; it is promoted only when the clicks' sequential test (alpha 0.05) says better, dropped when it says not. Give the replicas' P (0: promote on the offline check alone).")]
AuditShareOpt = Annotated[float, typer.Option("--audit-share", min=0.0, max=1.0, help="The share of --judge-budget all audits together may pay (the drift re-scores and the --audit set's pairs the ledger does not hold yet; pairs it holds are free to re-read). 0.2: a fifth.")]
ChainLearnOpt = Annotated[Optional[str], typer.Option("--chain", help="Learn chain encoder versions into this chain registry (a folder or postgresql:// URL that `tttembed states add` made) from the stored chain searches (POST /v1/chain/search), instead of learned states: their served states, judged through --judge within --judge-budget, a candidate warm-started from the served version, promoted only when better on questions held out by text (--min-queries, p < 0.05).")]
OnceOpt = Annotated[bool, typer.Option("--once", help="With --chain: judge what the budget allows, run one learning cycle, and exit.")]
RetainOpt = Annotated[str, typer.Option("--retain", help="How long logged traffic is kept: searches, impressions, interventions and click events older than this are pruned in small batches in the background (30s, 5m, 2h, 7d, 1w; forever: nothing is pruned). Paid judgments, people's labels and click rewards are never pruned. It must cover the clicks' settle time twice (--click-settle-s).")]
KeepVersionsOpt = Annotated[int, typer.Option("--keep-versions", min=2, help="Registry versions kept besides the served one and the pinned ones (`tttembed states pin`): the newest, the one a rollback returns to, then the last promoted, then the candidates refused within --retain, as room remains; the learner drops the rest after each prune.")]
MinQueriesOpt = Annotated[int, typer.Option("--min-queries", min=2, help="Rewarded queries the promotion's paired test needs at least (it promotes only when that test says better at alpha 0.05); fewer decide nothing.")]


def retention(retain: str, keep_versions: int, settle_s: float | None = None) -> Any:
    """The Retention of ``--retain`` and ``--keep-versions`` (``settle_s``: checked
    against that click-settle time, as a learner's config checks it)."""
    from tttembed.loop.retention import Retention

    kept = Retention.parse(retain, keep_versions)
    if settle_s is not None:
        kept.check(settle_s)
    return kept


def loop_config(registry: str | Path | None, index: Path, judge: str | None, **kw: Any) -> Any:
    """The LoopConfig of the CLI's options (``scope`` a comma-separated list)."""
    from tttembed.loop.config import LoopConfig

    scope = str(kw.pop("scope", "query,task"))
    options: dict[str, Any] = {k: (str(v) if isinstance(v, Path) else v) for k, v in kw.items()}
    return LoopConfig(registry=str(registry), index=str(index), judge=str(judge),
                      scopes=tuple(s.strip() for s in scope.split(",") if s.strip()),
                      **options)


@handle_errors
def loop(
    registry: RegistryOpt,
    index: Annotated[Path, typer.Option("--index", "-i", help="The index the replicas serve.")],
    judge: JudgeOpt,
    store: StoreOpt = None,
    corpus: LoopCorpusOpt = None,
    judge_budget: JudgeBudgetOpt = 1000,
    judge_rpm: JudgeRpmOpt = 600.0,
    learn_every: LearnEveryOpt = 100,
    scope: LoopScopeOpt = "query,task",
    judge_depth: JudgeDepthOpt = 10,
    depth: LoopDepthOpt = 100,
    drift_sample: DriftSampleOpt = 20,
    drift_threshold: DriftThresholdOpt = 0.3,
    audit: AuditOpt = None,
    audit_min_auc: AuditMinAucOpt = 0.6,
    audit_share: AuditShareOpt = 0.2,
    min_queries: MinQueriesOpt = 20,
    clicks: ClicksOpt = "ips",
    click_settle_s: ClickSettleOpt = 300.0,
    interleave: LoopInterleaveOpt = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the validation and the audit samples.")] = 0,
    nice: Annotated[int, typer.Option("--nice", min=0, max=19, help="CPU priority offset of the learner (serving first).")] = 10,
    registry_cache: RegistryCacheOpt = None,
    chain: ChainLearnOpt = None,
    once: OnceOpt = False,
    retain: RetainOpt = "7d",
    keep_versions: KeepVersionsOpt = 20,
) -> None:
    """Run the closed loop's learner: judge served pairs, learn, validate, promote."""
    quiet_libraries()
    _check_once(once, chain)
    from tttembed.loop.config import check_specs
    from tttembed.loop.run import run_loop

    config = loop_config(registry, index, judge, store=store, corpus=corpus,
                         judge_budget=judge_budget, judge_rpm=judge_rpm,
                         learn_every=learn_every, scope=scope, judge_depth=judge_depth,
                         depth=depth, drift_sample=drift_sample,
                         drift_threshold=drift_threshold, audit=audit,
                         audit_min_auc=audit_min_auc, audit_share=audit_share,
                         min_queries=min_queries, seed=seed,
                         nice=nice, clicks=clicks, click_settle_s=click_settle_s,
                         interleave=interleave,
                         registry_cache=str(registry_cache) if registry_cache else None,
                         retention=retention(retain, keep_versions))
    check_specs(config)
    warn_unaudited(config)
    from tttembed.core.pg import mask_url
    from tttembed.serve.run import die_with_server

    die_with_server()  # started by serve --learn: ends with its server

    if chain is not None:
        return _learn_chain(config, chain, once)
    typer.echo(f"learning into {mask_url(registry)} (Ctrl-C stops after the step in flight)",
               err=True)
    run_loop(config)


def _check_once(once: bool, chain: str | None) -> None:
    if once and chain is None:
        raise typer.BadParameter("--once works with --chain only (a state learner runs "
                                 "until stopped)", param_hint="--once")


def _learn_chain(config: Any, chain: str, once: bool) -> None:
    """``loop --chain``: learn chain encoder versions from the stored chain searches."""
    from tttembed.core.pg import mask_url
    from tttembed.loop.chain.run import run_chain_loop

    typer.echo(f"learning chain versions into {mask_url(chain)} (Ctrl-C stops after the "
               "step in flight)", err=True)
    run_chain_loop(config, chain, once=once)


def warn_unaudited(config: Any) -> None:
    """The start-up warnings of a loop (once: not again in the learner ``serve --learn``
    starts): a judge nobody audits, a --min-queries no promotion can reach."""
    import os

    from tttembed.loop.config import never_promotes
    from tttembed.serve.run import SERVED_LEARNER_ENV

    if os.environ.get(SERVED_LEARNER_ENV):
        return
    if not config.audit and config.has_judge:
        from tttembed.loop.failures import UNAUDITED

        typer.echo(f"warning: {UNAUDITED}", err=True)
    if never := never_promotes(config):
        typer.echo(f"warning: {never}", err=True)


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
