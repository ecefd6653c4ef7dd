"""``tttembed learn`` (rewards -> state file) and ``tttembed rerank`` (direct reranking)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tttembed.cli._common import (
    console,
    emit_json,
    handle_errors,
    http_embedder_for_index,
    json_mode,
    progress_group,
    quiet_libraries,
)
from tttembed.cli._options import (
    AlphaOpt,
    BudgetOpt,
    CacheOpt,
    ConcurrencyOpt,
    CorpusOpt,
    DepthOpt,
    ExecutorOpt,
    FoldsOpt,
    IdenticalIdsOpt,
    IndexOpt,
    InstructionOpt,
    JsonOpt,
    LedgerOpt,
    MaxRetriesOpt,
    MetricsOpt,
    OverwriteOpt,
    QueriesArg,
    QuietOpt,
    RankOpt,
    RayActorsOpt,
    RayAddressOpt,
    RayGpusOpt,
    ResamplesOpt,
    RetryMissingOpt,
    RpmOpt,
    RunTagOpt,
    ScorerOpt,
    SeedOpt,
    SplitOpt,
    TaskOpt,
    TimeoutOpt,
    TopKOpt,
    ray_executor,
)
from tttembed.cli.compare import metric_names
from tttembed.cli.learn_report import print_crossval, print_selection
from tttembed.cli.search import print_identical, raw_beside_adapted, write_runs
from tttembed.core.io import refuse_existing

SCOPE_HELP = ("global (one vector), task (one per task), query (one per rewarded query), "
              "adapter (per task a vector and a rank --rank query-side map) or neighbour "
              "(query-wise vectors that unseen queries close to a rewarded one borrow).")


def folder_qrels(spec: str, queries: Sequence[Path], split: str = "test") -> str:
    """``--scorer qrels`` (as ``eval`` takes it): the judgments of the first query folder,
    ``qrels:FOLDER/qrels/SPLIT.tsv``; any other spec unchanged."""
    if spec != "qrels":
        return spec
    for source in queries:
        path = Path(source) / "qrels" / f"{split}.tsv"
        if path.is_file():
            return f"qrels:{path}"
    raise typer.BadParameter("bare 'qrels' means the judgments of a BEIR query folder "
                             f"(qrels/{split}.tsv); none of the query sources has them: "
                             "give qrels:PATH", param_hint="--scorer")


def _open(api: Any, index: Path, spec: str, corpus: Optional[Path], ledger: Optional[Path],
          cache_dir: Optional[Path], instruction: Optional[str],
          http: tuple[Optional[float], Optional[int]] = (None, None),
          retry_missing: bool = False,
          limits: tuple[Optional[int], Optional[float]] = (None, None),
          queries: Sequence[Path] = (), split: str = "test"
          ) -> tuple[Any, Any, Any]:
    """The index, its own embedder and the scorer (through the ledger); ``http`` is
    (--timeout, --max-retries) for HTTP backends, ``limits`` (--concurrency, --rpm) for
    an HTTP scorer."""
    handle = api.open_index(index)
    emb = http_embedder_for_index(handle, cache_dir, *http)
    spec = folder_qrels(spec, queries, split)
    options = {"instruction": instruction} if instruction else {}
    sc = api.load_scorer(spec, index=handle, corpus=corpus, ledger=ledger,
                         cache_dir=cache_dir, retry_missing=retry_missing, **options,
                         **api.HttpLimits(*http, *limits).options(spec))
    return handle, emb, sc


@handle_errors
def learn(
    queries: QueriesArg,
    index: IndexOpt,
    scorer: ScorerOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="State file to write (.npz, with a .json sidecar); refused if it exists, unless --overwrite.")] = Path("vectors.npz"),
    scope: Annotated[str, typer.Option(help=SCOPE_HELP)] = "task", rank: RankOpt = 8,
    method: Annotated[str, typer.Option("--method", help="scope: learn the --scope state (default). auto: per task, the deployable state the validation says helps (raw, global, task or adapter for every query; query, reward-weighted Rocchio or Qdrant's naive formula for the rewarded texts; neighbour transfer for unseen queries near them), one state file; --scope is then ignored.")] = "scope",
    allocation: Annotated[str, typer.Option("--allocation", help="waterfill: the fixed plan (seeded query order, --depth candidates each; default). active: the same number of pairs chosen in rounds as the judge answers: the least certain queries first, then the misordered ones deeper and the corpus neighbours of their best-rewarded documents.")] = "waterfill",
    budget: BudgetOpt = 10.0,
    depth: DepthOpt = 10,
    objective: Annotated[str, typer.Option(help="kd (default), rkl or grpo.")] = "kd",
    split: SplitOpt = "test",
    task: TaskOpt = None,
    corpus: CorpusOpt = None,
    instruction: InstructionOpt = None,
    seed: SeedOpt = 0,
    ledger: LedgerOpt = None,
    cache_dir: CacheOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the reward plan and its cost; score nothing.")] = False,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    retry_missing: RetryMissingOpt = False,
    concurrency: ConcurrencyOpt = None,
    rpm: RpmOpt = None,
    alpha: AlphaOpt = "rule",
    folds: FoldsOpt = 5,
    validate_budget: Annotated[Optional[float], typer.Option("--validate-budget", min=0, help="--alpha auto and --method auto: validation pairs per query the guard may pay (the never-judged top-10 documents of re-searched queries); default a tenth of --budget. Past it, a random sample of them is paid and the others count its mean reward.", show_default=False)] = None,
    audit: Annotated[Optional[str], typer.Option("--audit", help="qrels:PATH, human judgments of a few of the queries: the scorer scores their judged documents first (through the ledger) and is refused when its agreement with people (ROC AUC) is below --audit-min-auc.", show_default=False)] = None,
    audit_min_auc: Annotated[float, typer.Option("--audit-min-auc", min=0, max=1, help="Lowest AUC against the --audit judgments a scorer may show.")] = 0.6,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_actors: RayActorsOpt = 1,
    ray_gpus: RayGpusOpt = 0.0,
    trust_judge: Annotated[bool, typer.Option("--trust-judge", help="Learn even when the judge check refuses the scorer: its rewards rise toward the bottom of the base ranking's lists (an inverted judge, unless you know better).")] = False,
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Spend a reward budget on retrieved candidates and learn query vectors."""
    quiet_libraries()
    from tttembed import api
    from tttembed.ttt import LearnOptions, learn_with
    _refuse_existing_state(out, overwrite or dry_run)  # before paying for a pair
    options = LearnOptions(scope=scope, method=method, alpha=alpha, objective=objective,
                           budget=budget, depth=depth, folds=folds, validate_budget=validate_budget,
                           audit=audit, audit_min_auc=audit_min_auc, allocation=allocation,
                           trust_judge=trust_judge, seed=seed, rank=rank, dry_run=dry_run)
    handle, emb, sc = _open(api, index, scorer, corpus, ledger, cache_dir, instruction,
                            (timeout, max_retries), retry_missing, (concurrency, rpm),
                            queries, split)
    with json_mode(as_json), progress_group(not quiet) as stage:
        qs = _query_set(handle, queries, task, split, ignore_identical_ids)
        state = learn_with(handle, qs, options, scorer=sc, embedder=emb, corpus=corpus,
                           progress=stage, executor=ray_executor(executor, ray_address,
                                                                 ray_actors, ray_gpus))
    if dry_run:
        _plan(state.pairs, budget, depth, sc.spec, as_json)
        return
    _save(state, out, overwrite, as_json)


def _query_set(index: Any, queries: Sequence[Path], task: Optional[list[str]], split: str,
               ignore_identical_ids: Optional[bool]) -> Any:
    """The queries to learn from, and the line saying where each task's identical-ids
    rule came from (when it is on)."""
    from tttembed.ttt.queries import as_query_set

    qs = as_query_set(list(queries), task, split, ignore_identical_ids, index)
    print_identical(dict(qs.identical_why))
    return qs


def _refuse_existing_state(out: Path, replace_it: bool) -> None:
    """``--out`` exists: refused unless ``--overwrite`` (or ``--dry-run``, which writes
    nothing)."""
    from tttembed.core.errors import ConfigError

    if out.exists() and not replace_it:
        raise ConfigError(f"state file {out} already exists; pass --overwrite to replace "
                          "it, or choose another --out")


def _plan(p: dict, budget: float, depth: int, spec: str, as_json: bool) -> None:
    cap = int(p.get("validation_cap") or 0)
    more = (f"; then validation (--method auto / --alpha auto): at most {cap:,} more pairs, "
            f"so at most {p['to_pay'] + cap:,} scorer calls in all") if cap else ""
    console.print(f"reward plan: {p['requested']:,} pairs to learn from (b = {budget:g}), "
                  f"depth {depth}; already in the ledger: {p['in_ledger']:,}; to pay: "
                  f"{p['to_pay']:,} scorer calls ({spec}){more}. Nothing was scored.")
    if as_json:
        emit_json({"dry_run": True, "budget": budget, "depth": depth, "pairs": p,
                   "scorer": spec})


def _save(state: Any, out: Path, overwrite: bool, as_json: bool) -> None:
    """Write the state, print what it holds (stderr with --json), the JSON document; a
    state that learned nothing is exit 1 with no file."""
    from tttembed.cli.inspect import state_summary

    if not state.keys and state.method != "auto":
        console.print("no query received a usable reward: nothing learned, no state written")
        raise typer.Exit(1)
    with json_mode(as_json):
        path = state.save(out, overwrite=overwrite)
        _summary(state, path)
        if state.audit:
            from tttembed.ttt.audit import audit_line

            console.print(f"audit: the scorer agrees with people at {audit_line(state.audit)}")
        print_crossval(state)
        print_selection(state)
    if as_json:
        emit_json({"state": str(path), **state_summary(replace(state, source=str(path)))})


def _summary(state: Any, path: Path) -> None:

    p = state.pairs
    held = int(p.get("missing_in_ledger", 0))
    console.print(f"pairs requested {p['requested']:,}, served from the ledger {p['cached']:,}, "
                  f"paid {p['paid']:,}, missing {p['missing']:,}" + (
                      f" ({held:,} served from the ledger with no reward: an earlier run "
                      "got no score for them; --retry-missing asks again)" if held else ""))
    if not len(state.keys):
        console.print(f"{state.scope}-wise state -> {path}: no vector (every task keeps its "
                      "raw query vectors)")
        console.print(f"next: tttembed search DATA --index INDEX --state {path}")
        return
    from tttembed.cli.inspect import groups_table, state_summary

    summary = state_summary(replace(state, source=str(path)))
    groups_table(summary["groups"], summary, title=f"{state.scope}-wise state -> {path}",
                 shown=15)
    console.print(f"next: tttembed search DATA --index INDEX --state {path}")


@handle_errors
def rerank(
    queries: QueriesArg,
    index: IndexOpt,
    scorer: ScorerOpt,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run file (.trec/.jsonl); one per task gets the task name appended when several.")] = None,
    budget: BudgetOpt = 10.0,
    depth: DepthOpt = 10,
    top_k: TopKOpt = 100,
    split: SplitOpt = "test",
    task: TaskOpt = None,
    corpus: CorpusOpt = None,
    instruction: InstructionOpt = None,
    seed: SeedOpt = 0,
    ledger: LedgerOpt = None,
    cache_dir: CacheOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    retry_missing: RetryMissingOpt = False,
    concurrency: ConcurrencyOpt = None,
    rpm: RpmOpt = None,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_actors: RayActorsOpt = 1,
    ray_gpus: RayGpusOpt = 0.0,
    metrics: MetricsOpt = None,
    n_resamples: ResamplesOpt = 10000,
    run_tag: RunTagOpt = "tttembed",
    ignore_identical_ids: IdenticalIdsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Direct reranking baseline: rewarded candidates sorted by reward inside their slots."""
    quiet_libraries()
    from tttembed import api

    if out is not None:
        refuse_existing(out, overwrite, "run file")  # before paying for a pair

    handle, emb, sc = _open(api, index, scorer, corpus, ledger, cache_dir, instruction,
                            (timeout, max_retries), retry_missing, (concurrency, rpm),
                            queries, split)
    names = metric_names(metrics)
    with json_mode(as_json), progress_group(not quiet) as stage:
        result = api.rerank(handle, queries, scorer=sc, budget=budget, k=top_k, depth=depth,
                            seed=seed, task=task, split=split, embedder=emb, corpus=corpus,
                            progress=stage, ignore_identical_ids=ignore_identical_ids,
                            executor=ray_executor(executor, ray_address, ray_actors, ray_gpus))
        print_identical(result.identical_why)
        if out is not None:
            write_runs(result.runs(), out, None, overwrite, run_tag)
        paired = {}
        if result.qrels:  # the reranked result beside raw, never alone
            raw = api.search(handle, queries, k=top_k, task=task, split=split, embedder=emb,
                             ignore_identical_ids=ignore_identical_ids)
            paired = raw_beside_adapted(raw, result, names, n_resamples,
                                        f", b = {budget:g}", name="reranked")
    if as_json:
        emit_json({"budget": budget, "queries": len(result.qids), "runs": str(out or ""),
                   "paired": paired})
