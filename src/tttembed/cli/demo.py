"""``tttembed demo``: the whole job offline on real text every machine has.

Corpus: the docstrings of this Python's standard library. Questions and graded labels:
shipped with tttembed (``examples/stdlib_docs``). Steps: index, raw search (nDCG@10),
then TTT-Embed: a task-wise state learned from the labels of 80% of the questions
(the human-judge ``qrels`` scorer), applied to the unseen 20%: raw vs adapted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_bar, quiet_libraries
from tttembed.embed.base import DEFAULT_EMBEDDER

TASK = "stdlib-docs"


def split_queries(qids: list[str], frac: float = 0.8, seed: int = 0) -> tuple[list[str], list[str]]:
    """A seeded split: ``frac`` of the queries get rewards, the rest are evaluated."""
    import numpy as np

    perm = np.random.default_rng(seed).permutation(len(qids))
    n = int(round(frac * len(qids)))
    return [qids[i] for i in sorted(perm[:n])], [qids[i] for i in sorted(perm[n:])]


@handle_errors
def demo(
    embedder: Annotated[str, typer.Option(help="Embedder spec.")] = DEFAULT_EMBEDDER,
    workdir: Annotated[Optional[Path], typer.Option(help="Where to write the demo index, runs and state (default: <cache>/demo).")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Cache directory.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=10, help="Results per query.")] = 100,
    budget: Annotated[float, typer.Option(min=0, help="Labels per rewarded question (b).")] = 10.0,
    seed: Annotated[int, typer.Option(help="Seed of the 80/20 question split.")] = 0,
    modules: Annotated[Optional[str], typer.Option(help="Comma-separated stdlib modules to index instead of the default set (questions whose labels are absent are dropped).")] = None,
) -> None:
    """Offline demo: index stdlib docstrings, search shipped questions, learn from 80% of the labels.

    Raw nDCG@10 on every question, then a task-wise state learned from the labels of 80%
    of the questions, raw vs adapted on the unseen 20%.
    """
    quiet_libraries()
    from tttembed import api
    from tttembed.adapt import save_state
    from tttembed.cli.report import print_metrics
    from tttembed.demo.corpus import demo_task
    from tttembed.ttt.learn import adapted_search, learn
    from tttembed.core.paths import cache_dir as default_cache
    from tttembed.score.qrels import QrelsScorer
    from tttembed.ttt.queries import QuerySet, run_from_arrays

    work = workdir or default_cache(cache_dir) / "demo"
    task = demo_task(tuple(m.strip() for m in modules.split(",") if m.strip())) if modules \
        else demo_task()
    if not task.queries:
        from tttembed.core.errors import ConfigError

        raise ConfigError(f"no shipped question has its labels inside modules {modules!r}; "
                          "add more modules or drop --modules")
    corpus, queries, qrels = task.corpus, task.queries, task.qrels
    dropped = task.dropped_labels
    console.print(f"corpus: {len(corpus):,} docstrings of this Python's standard library; "
                  f"{len(queries)} shipped questions with graded labels"
                  + (f" ({dropped} labels dropped: ids absent from this Python)" if dropped else ""))
    emb = api.load_embedder(embedder, cache_dir=cache_dir)
    with progress_bar("embedding corpus", total=len(corpus)) as advance:
        api.index_corpus(corpus, work / "index", embedder=emb, overwrite=True,
                         source="python-stdlib-docstrings", progress=advance)
    index = api.open_index(work / "index", embedder=emb)
    result = api.search(index, queries, embedder=emb, k=top_k)
    run = result.to_run()
    api.write_run(run, work / "raw.trec")
    print_metrics({TASK: (qrels, run)}, title="1. raw search, all questions")

    learn_ids, test_ids = split_queries(list(queries), 0.8, seed)
    lq = QuerySet.from_tasks({TASK: {q: queries[q] for q in learn_ids}})
    tq = QuerySet.from_tasks({TASK: {q: queries[q] for q in test_ids}})
    scorer = QrelsScorer("demo-labels", qrels={q: qrels[q] for q in learn_ids})
    outcome = learn(index, emb, lq, corpus, scorer, scope="task", avg_budget=budget)
    if outcome.state is None:
        console.print("no rewards: nothing learned")
        raise typer.Exit(1)
    save_state(work / "vectors.npz", outcome.state)
    x = emb.encode(list(tq.texts), "query")
    test_qrels = {q: qrels[q] for q in test_ids}
    raw_s, raw_r = index.search(x, top_k)
    ada_s, ada_r = adapted_search(index, tq, x, [outcome.state], top_k)
    runs = {"raw": run_from_arrays(tq, index, raw_r, raw_s)[TASK],
            "adapted (task-wise)": run_from_arrays(tq, index, ada_r, ada_s)[TASK]}
    console.print(f"\n2. TTT-Embed: labels of {len(learn_ids)} questions (b = {budget:g}: "
                  f"{len(outcome.plan.pairs)} judged pairs) -> one task-wise vector "
                  f"(alpha = {outcome.state.alpha[0]:.3f}), applied to {len(test_ids)} unseen questions")
    scores = print_metrics({name: (test_qrels, r) for name, r in runs.items()},
                           title="unseen 20% of the questions")
    from tttembed.evaluate.metrics import evaluate_per_query
    from tttembed.evaluate.stats import compare

    per_q = {n: evaluate_per_query(test_qrels, r, ("ndcg@10",))["ndcg@10"] for n, r in runs.items()}
    cmp = compare(per_q["adapted (task-wise)"], per_q["raw"])
    console.print(f"adapted - raw nDCG@10 = {cmp.delta:+.4f} on {cmp.n} unseen questions "
                  f"(paired randomisation p = {cmp.p_value:.3f}, 95% CI [{cmp.ci_low:+.4f}, "
                  f"{cmp.ci_high:+.4f}]); a shared vector helps when a task's questions share "
                  "a need: these mix many topics, so expect a small effect either way")
    del scores
    console.print(f"model calls this run: {emb.model_calls} (0 when the cache is warm); "
                  f"index, runs and state in {work}")
