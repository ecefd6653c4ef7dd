"""``tttembed loop``: the learner alone, beside N serve replicas (the registry's versions
are ``tttembed states``: :mod:`tttembed.cli.states`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import handle_errors, quiet_libraries

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
