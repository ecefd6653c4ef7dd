"""``tttembed demo``: the whole job offline on real text every machine has."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import (
    console,
    handle_errors,
    print_metrics,
    progress_group,
    quiet_libraries,
    split_list,
)
from tttembed.cli._options import BudgetOpt, CacheOpt, EmbedderOpt, QuietOpt, TopKOpt
from tttembed.embed.base import DEFAULT_EMBEDDER


@handle_errors
def demo(
    embedder: EmbedderOpt = DEFAULT_EMBEDDER,
    workdir: Annotated[Optional[Path], typer.Option(help="Where to write the demo index, runs and state (default: <cache>/demo; rewritten each run).")] = None,
    cache_dir: CacheOpt = None,
    top_k: TopKOpt = 100,
    budget: BudgetOpt = 10.0,
    seed: Annotated[int, typer.Option(help="Seed of the 80/20 question split.")] = 0,
    modules: Annotated[Optional[str], typer.Option(help="Comma-separated stdlib modules to index instead of the default set (questions whose labels are absent are dropped).")] = None,
    export: Annotated[Optional[Path], typer.Option(help="Write the demo task as a BEIR folder here (corpus.jsonl, queries.jsonl, qrels/test.tsv) and stop: data to try every other command on.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Offline demo: index stdlib docstrings, search shipped questions, learn from 80% of the labels.

    Raw nDCG@10 on every question, then a task-wise state learned from the labels of 80%
    of the questions, raw vs adapted on the unseen 20%.
    """
    quiet_libraries()
    from tttembed import demo

    if export is not None:
        path = demo.export_demo(export, modules=split_list([modules or ""]))
        console.print(f"wrote the demo task as a BEIR folder: {path}\n"
                      f"next: tttembed index {path} --out idx/{path.name}")
        return
    with progress_group(not quiet) as stage:
        r = demo.run_demo(embedder=embedder, workdir=workdir, cache_dir=cache_dir, k=top_k,
                         budget=budget, seed=seed, modules=split_list([modules or ""]),
                         progress=stage)
    console.print(f"corpus: {r.n_docs:,} docstrings of this Python's standard library; "
                  f"{len(r.qrels)} shipped questions with graded labels"
                  + (f" ({r.dropped_labels} labels dropped: ids absent from this Python)"
                     if r.dropped_labels else ""))
    print_metrics({"raw": (r.qrels, r.raw_run)}, title="1. raw search, all questions")
    st = r.state
    console.print(f"\n2. TTT-Embed: labels of {len(r.learn_ids)} questions (b = {budget:g}: "
                  f"{st.pairs['requested']} judged pairs) -> one task-wise vector "
                  f"(alpha = {st.alpha[0]:.4f}), applied to {len(r.test_ids)} unseen questions")
    test_qrels = {q: r.qrels[q] for q in r.test_ids}
    print_metrics({name: (test_qrels, run) for name, run in r.unseen_runs.items()},
                  title="unseen 20% of the questions")
    c = r.comparison
    console.print(f"adapted - raw nDCG@10 = {c.delta:+.4f} on {c.n} unseen questions "
                  f"(paired randomisation p = {c.p_value:.3f}, 95% CI [{c.ci_low:+.4f}, "
                  f"{c.ci_high:+.4f}]).")
    console.print(
        "What this means: nDCG@10 is 1.0 when every question's best documents lead its "
        "top 10. One shared vector helps when a task's questions share a need; these "
        "questions mix many topics, so expect a small effect either way (a p-value above "
        "0.05 means no detectable difference).")
    console.print(f"model calls this run: {r.model_calls} (0 when the cache is warm); "
                  f"index, runs and state in {r.workdir}")
    console.print("next, on your own data (a BEIR folder with corpus.jsonl, queries.jsonl, "
                  "qrels/test.tsv):\n"
                  "  tttembed index DATA --out idx\n"
                  "  tttembed learn DATA --index idx --scorer bm25 --scope task --budget 10 "
                  "--out vectors.npz\n"
                  "  tttembed search DATA --index idx --state vectors.npz")
