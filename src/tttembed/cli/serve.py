"""``tttembed serve``: the OpenAI-compatible embeddings service over an index, with learned
states applied to the query side (``/t/{task}/v1/embeddings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import handle_errors, quiet_libraries
from tttembed.cli._options import IndexOpt, SplitOpt, TaskOpt
from tttembed.cli.loop import (
    AuditMinAucOpt,
    AuditOpt,
    AuditShareOpt,
    ClickSettleOpt,
    ClicksOpt,
    DriftSampleOpt,
    DriftThresholdOpt,
    JudgeBudgetOpt,
    JudgeDepthOpt,
    JudgeRpmOpt,
    KeepVersionsOpt,
    LearnEveryOpt,
    LoopCorpusOpt,
    LoopScopeOpt,
    MinQueriesOpt,
    RegistryCacheOpt,
    RetainOpt,
    StoreOpt,
    loop_config,
    retention,
    warn_unaudited,
)

ChainOpt = Annotated[Optional[str], typer.Option("--chain", help="Serve POST /v1/chain/search (multi-hop chain retrieval) with this encoder: base (the index's model, untrained), a checkpoint folder `tttembed chain train` wrote, or a chain registry (a folder or postgresql:// URL made by `tttembed states add REGISTRY CHECKPOINT`: its promoted version, followed like --registry; REGISTRY@vN pins one). With --learn, a chain registry (not pinned) is also learned into: a chain learner (`tttembed loop --chain`) runs beside the state learner, on the same store, ledger and --judge-budget; with base, a checkpoint folder or REGISTRY@vN, --learn learns states only (a note at start-up says so).")]
MaxQueryCharsOpt = Annotated[int, typer.Option("--max-query-chars", min=1, help="Most characters in one query (search, query embeddings, chain search, feedback by query): 413 beyond, naming the limit.")]
ChainSeqOpt = Annotated[Optional[int], typer.Option("--chain-max-seq-length", min=8, help="With --chain: the state token limit of the chain encoder (question plus the passages found; as `tttembed chain search --max-seq-length`). Default: the limit each served checkpoint was trained with; 128 for base.")]
UpstreamDeadlineOpt = Annotated[float, typer.Option("--upstream-deadline", min=0.1, help="Seconds a search waits for an HTTP embedder (an index built with openai:), all attempts and waits together, before it answers 502 (a hung upstream holds no search longer).")]
ChainStateOpt = Annotated[Optional[str], typer.Option("--chain-state", help="With --chain: the state form, text or entities (each passage's first 3 names and years: cheaper, and as good or better with the untrained model; as `tttembed chain search --chain-state`). Default: the form each served checkpoint was trained on; entities for base.")]


@handle_errors
def serve(
    index: IndexOpt,
    state: Annotated[Optional[list[Path]], typer.Option("--state", help="Learned state file(s) (vectors.npz), re-read on POST /admin/reload and SIGHUP. The most specific state wins per query: query-wise (by query text), task-wise, global.")] = None,
    queries: Annotated[Optional[list[Path]], typer.Option("--query-source", help="Query sources (BEIR folder or query file, one task each) that name tasks this server knows and the query ids of their texts (for reports). Not needed by query-wise states: they match a request by its text.")] = None,
    task: TaskOpt = None,
    split: SplitOpt = "test",
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes (each loads the model; SIGHUP rolls them over).")] = 1,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="Name of the environment variable holding the bearer key every route but /healthz requires (the key itself never goes on the command line).")] = None,
    allow_foreign_state: Annotated[bool, typer.Option("--allow-foreign-state", help="Apply states learned on another corpus than the index's.")] = False,
    unknown_task: Annotated[Optional[str], typer.Option("--unknown-task", help="A request for a task that no state or query file names: global (global states only) or raw (no state); default: 404 listing the known tasks.")] = None,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Largest request body accepted (413 beyond).")] = 2_000_000,
    max_inputs: Annotated[int, typer.Option(min=1, help="Most texts in one request.")] = 2048, max_query_chars: MaxQueryCharsOpt = 16_384,
    cache_size: Annotated[int, typer.Option(min=0, help="Vectors kept in the in-memory LRU cache (0: none).")] = 50_000,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Most texts in one model call: concurrent requests are merged up to it.")] = 32,
    max_wait_ms: Annotated[float, typer.Option("--max-wait-ms", min=0, max=1000, help="How long a request waits for others to join its model batch (0: never).")] = 2.0,
    log_level: Annotated[str, typer.Option(help="debug, info (one JSON access line per request), warning or error.")] = "info",
    registry: Annotated[Optional[str], typer.Option("--registry", help="Serve the promoted version of this state registry, a folder or postgresql://USER@HOST:PORT/DB (PG* variables read as psycopg reads them; replicas on several machines then share nothing but the database): reloaded within a second of a promotion or rollback (at once on PostgreSQL: LISTEN/NOTIFY); log every query and take POST /v1/feedback into its store.")] = None,
    registry_cache: RegistryCacheOpt = None, chain: ChainOpt = None, chain_max_seq_length: ChainSeqOpt = None, chain_state: ChainStateOpt = None, upstream_deadline: UpstreamDeadlineOpt = 30.0,
    learn: Annotated[bool, typer.Option("--learn", help="Also run the learner (a low-priority child process): judge served pairs, learn, validate, promote into --registry; with --chain CHAIN_REGISTRY (a chain registry, not pinned) also a chain learner (a second child) that learns chain versions into it from the chain searches, both within the one --judge-budget (one spend account in the store).")] = False,
    judge: Annotated[Optional[str], typer.Option("--judge", help="With --learn: the background judge's scorer spec (rerank:MODEL@URL, llm:MODEL@URL, bm25, ...).")] = None,
    judge_budget: JudgeBudgetOpt = 1000, judge_rpm: JudgeRpmOpt = 600.0,
    learn_every: LearnEveryOpt = 100, scope: LoopScopeOpt = "query,task",
    store: StoreOpt = None, corpus: LoopCorpusOpt = None,
    audit: AuditOpt = None, audit_min_auc: AuditMinAucOpt = 0.6,
    audit_share: AuditShareOpt = 0.2, judge_depth: JudgeDepthOpt = 10,
    drift_sample: DriftSampleOpt = 20, drift_threshold: DriftThresholdOpt = 0.3,
    min_queries: MinQueriesOpt = 20, clicks: ClicksOpt = "ips",
    click_settle_s: ClickSettleOpt = 300.0,
    explore: Annotated[float, typer.Option("--explore", min=0.0, max=1.0, help="RandPair exploration (needs --registry): on this fraction P of searches swap one random adjacent pair of the top 10 before returning it, logged as an intervention for the position-bias estimate. Traffic cost: P of searches show one pair in the other order (0: none).")] = 0.0,
    interleave: Annotated[float, typer.Option("--interleave", min=0.0, max=1.0, help="Interleaving as the online promotion test (needs --registry): while the registry names a candidate version, serve this fraction P of searches as a team-draft interleaving of the served version and the candidate; the learner promotes the candidate only when the clicks on them say it is better (a sequential test at alpha 0.05). Traffic cost: up to half of each interleaved list comes from the unpromoted candidate, and those searches run the search twice (0: off).")] = 0.0,
    retain: RetainOpt = "7d", keep_versions: KeepVersionsOpt = 20,
) -> None:
    """Serve OpenAI-compatible embeddings: raw for documents, adapted for queries."""
    quiet_libraries()
    from tttembed.serve.config import Batching, Listen, RequestLimits, ServeConfig, ServeLoop
    cache = _str(registry_cache)
    kept = retention(retain, keep_versions, click_settle_s if registry else None)
    learner = _learner(learn, registry, index, judge, store=store, corpus=corpus, scope=scope,
                       judge_budget=judge_budget, judge_rpm=judge_rpm, learn_every=learn_every,
                       audit=audit, audit_min_auc=audit_min_auc, audit_share=audit_share,
                       judge_depth=judge_depth, drift_sample=drift_sample, clicks=clicks,
                       drift_threshold=drift_threshold, min_queries=min_queries,
                       click_settle_s=click_settle_s, interleave=interleave, registry_cache=cache,
                       retention=kept)
    config = ServeConfig(
        index=str(index), states=tuple(str(s) for s in state or ()), split=split,
        queries=tuple(str(q) for q in queries or ()), tasks=tuple(task or ()), corpus=_str(corpus),
        api_key_env=api_key_env, allow_foreign_state=allow_foreign_state, unknown_task=unknown_task, chain=chain, chain_max_seq_length=chain_max_seq_length, chain_state=chain_state, upstream_deadline_s=upstream_deadline,
        listen=Listen(host=host, port=port, workers=workers, log_level=log_level.lower()),
        limits=RequestLimits(max_body_bytes=max_body_bytes, max_inputs=max_inputs, max_query_chars=max_query_chars),
        batching=Batching(cache_size=cache_size, max_batch=max_batch, max_wait_ms=max_wait_ms),
        loop=ServeLoop(registry=str(registry) if registry else None, store=store,
                       registry_cache=cache, explore=explore, interleave=interleave,
                       retention=kept))
    _start(config, learner)


def _str(path: Optional[Path]) -> Optional[str]:
    return str(path) if path else None


def _learner(learn: bool, registry: Optional[str], index: Path, judge: Optional[str],
             **kw: Any) -> Any:
    """``--learn``'s LoopConfig (None without ``--learn``), from the one loop option list."""
    from tttembed.core.errors import ConfigError

    if not learn:
        return None
    if registry is None or not judge:
        raise ConfigError("--learn needs --registry DIR|URL and --judge SPEC")
    return loop_config(registry, index, judge, **kw)


def _start(config: Any, learner: Any) -> None:
    """Check the dependencies and every spec before the port is bound, then serve (with
    the learner beside it)."""
    from tttembed.serve.run import preflight, run, with_learner

    preflight(config, learner)
    if learner is not None:
        warn_unaudited(learner)
    host, port = config.listen.host, config.listen.port
    announce = (f"serving {config.index} on http://{host}:{port} (queries of "
                f"task T: http://{host}:{port}/t/T/v1; Ctrl-C stops)")
    if learner is None:
        run(config, announce=announce)
    else:
        with_learner(config, learner, announce=announce)
