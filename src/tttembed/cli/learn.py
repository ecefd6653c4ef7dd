"""``tttembed learn`` (rewards -> state file) and ``tttembed rerank`` (direct reranking)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from tttembed.cli._common import (
    console,
    handle_errors,
    progress_bar,
    progress_group,
    quiet_libraries,
)

SCOPES_HELP = "global (one vector), task (one per task) or query (one per rewarded query)."


def _setup(index: Path, queries: list[Path], split: str, task: list[str] | None,
           corpus: Path | None, scorer: str, ledger: Path | None, cache_dir: Path | None,
           instruction: str | None):
    from tttembed import api
    from tttembed.cli._inputs import load_corpus_for, load_query_sources
    from tttembed.ttt.learn import build_scorer
    from tttembed.ttt.queries import QuerySet

    qmap, qrels, folder = load_query_sources(queries, split, task)
    handle = api.open_index(index)
    emb = api.embedder_for_index(handle, cache_dir=cache_dir)
    docs = load_corpus_for(handle, corpus, folder)
    options = {"instruction": instruction} if instruction else {}
    sc = build_scorer(scorer, docs, ledger_path=ledger, cache_dir=cache_dir, **options)
    return handle, emb, QuerySet.from_tasks(qmap), qrels, docs, sc


@handle_errors
def learn(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index directory.")],
    queries: Annotated[list[Path], typer.Option("--queries", "-q", help="Query file or BEIR folder (one task each; repeatable).")],
    scorer: Annotated[str, typer.Option(help="Reward scorer spec: qwen3-reranker:PATH, cross-encoder:PATH, llm:MODEL@URL, qrels:PATH, bm25.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="State file to write (vectors.npz + vectors.json).")] = Path("vectors.npz"),
    scope: Annotated[str, typer.Option(help=SCOPES_HELP)] = "task",
    budget: Annotated[float, typer.Option(min=0, help="Average rewards per query (b): B = round(b * N) pairs.")] = 10.0,
    depth: Annotated[int, typer.Option(min=1, help="Candidates per rewarded query before all queries are covered.")] = 10,
    objective: Annotated[str, typer.Option(help="kd (default), rkl or grpo.")] = "kd",
    split: Annotated[str, typer.Option(help="Split for BEIR folders.")] = "test",
    task: Annotated[Optional[list[str]], typer.Option(help="Task name per --queries source.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="Corpus (BEIR folder or corpus.jsonl); default: from the query folder or the index manifest.")] = None,
    instruction: Annotated[Optional[str], typer.Option(help="Reranker instruction (qwen3-reranker).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the reward plan.")] = 0,
    ledger: Annotated[Optional[Path], typer.Option(help="Reward ledger (SQLite); default <cache>/ledger.sqlite.")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the reward plan and its cost; score nothing.")] = False,
) -> None:
    """Spend a reward budget on retrieved candidates and learn query vectors."""
    quiet_libraries()
    from tttembed.adapt import check_objective, check_scope, save_state
    from tttembed.ttt.learn import learn as run_learn

    check_scope(scope)
    check_objective(objective)
    handle, emb, qs, _, docs, sc = _setup(index, queries, split, task, corpus, scorer, ledger,
                                          cache_dir, instruction)
    with progress_group() as stage:
        outcome = run_learn(handle, emb, qs, docs, sc, scope=scope, avg_budget=budget,
                            depth=depth, objective=objective, seed=seed, dry_run=dry_run,
                            progress=stage)
    plan = outcome.plan
    if dry_run:
        to_pay = (len(plan.pairs) - plan.in_ledger) if plan.in_ledger is not None else len(plan.pairs)
        console.print(f"reward plan: {len(plan.pairs):,} pairs (b = {budget:g} x {plan.n_queries:,} "
                      f"queries) on {plan.queries_rewarded:,} queries, depth {depth}; "
                      f"already in the ledger: {plan.in_ledger if plan.in_ledger is not None else 'n/a'}; "
                      f"to pay: {to_pay:,} scorer calls ({sc.spec}). Nothing was scored.")
        return
    if outcome.state is None:
        console.print("no query received a usable reward: nothing learned, no state written")
        raise typer.Exit(1)
    path = save_state(out, outcome.state)
    _summary(outcome, path)


def _summary(outcome, path: Path) -> None:
    c = outcome.counts
    st = outcome.state
    console.print(f"pairs requested {c['requested']:,}, served from the ledger {c['cached']:,}, "
                  f"paid {c['paid']:,}, missing {c['missing']:,}")
    table = Table(title=f"{st.scope}-wise state -> {path}")
    table.add_column("group")
    table.add_column("n_g", justify="right")
    table.add_column("alpha", justify="right")
    table.add_column("|v|", justify="right")
    table.add_column("final loss", justify="right")
    import numpy as np

    norms = np.linalg.norm(st.vectors, axis=1)
    shown = min(len(st.keys), 15)
    for g in range(shown):
        table.add_row(st.keys[g], str(int(st.n_g[g])), f"{st.alpha[g]:.3f}", f"{norms[g]:.3f}",
                      f"{outcome.final_loss[g]:.4f}")
    if len(st.keys) > shown:
        table.add_row(f"... {len(st.keys) - shown} more", "", "", "", "")
    console.print(table)


@handle_errors
def rerank(
    index: Annotated[Path, typer.Option("--index", "-i", help="Index directory.")],
    queries: Annotated[list[Path], typer.Option("--queries", "-q", help="Query file or BEIR folder (repeatable).")],
    scorer: Annotated[str, typer.Option(help="Reward scorer spec.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run file (.trec/.jsonl); one per task gets the task name appended when several.")] = None,
    budget: Annotated[float, typer.Option(min=0, help="Average rewards per query.")] = 10.0,
    depth: Annotated[int, typer.Option(min=1)] = 10,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1)] = 100,
    split: Annotated[str, typer.Option()] = "test",
    task: Annotated[Optional[list[str]], typer.Option()] = None,
    corpus: Annotated[Optional[Path], typer.Option()] = None,
    instruction: Annotated[Optional[str], typer.Option()] = None,
    seed: Annotated[int, typer.Option()] = 0,
    ledger: Annotated[Optional[Path], typer.Option()] = None,
    cache_dir: Annotated[Optional[Path], typer.Option()] = None,
) -> None:
    """Direct reranking baseline: rewarded candidates sorted by reward inside their slots."""
    quiet_libraries()
    from tttembed import api
    from tttembed.ttt.learn import candidate_depth, make_plan, rerank_runs
    from tttembed.ttt.queries import base_retrieval, score_pairs

    handle, emb, qs, qrels, docs, sc = _setup(index, queries, split, task, corpus, scorer,
                                              ledger, cache_dir, instruction)
    k = max(top_k, candidate_depth(budget, depth, len(handle)))
    base = base_retrieval(handle, emb, qs, k)
    plan = make_plan(qs, base, handle, budget, depth, seed)
    with progress_bar("scoring pairs", len(plan.pairs)) as advance:
        rewards = score_pairs(plan.pairs, qs, docs, sc, progress=advance)
    runs = rerank_runs(qs, handle, base, rewards)
    runs = {t: {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:top_k]) for q, d in r.items()}
            for t, r in runs.items()}
    if out is not None:
        for t, run in runs.items():
            path = out if len(runs) == 1 else out.with_name(f"{out.stem}.{t}{out.suffix}")
            api.write_run(run, path)
            console.print(f"wrote {path}")
    if qrels:
        from tttembed.cli.report import print_metrics

        print_metrics({t: (qrels[t], runs[t]) for t in runs if t in qrels},
                      title=f"direct rerank, b = {budget:g}")
