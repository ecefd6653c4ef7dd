"""The demo pipeline, on text every machine has (the stdlib's docstrings): index, raw
search, then a guarded state (``learn --method auto``) learned from the labels of 80% of
the shipped questions (the human-judge ``qrels`` scorer), raw vs adapted on those
questions asked again and on the unseen 20%."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.adapt.state import AdaptState
from tttembed.core.errors import ConfigError
from tttembed.core.progress import Progress, stage
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.types import PathLike

TASK = "stdlib-docs"


def split_queries(qids: list[str], frac: float = 0.8, seed: int = 0) -> tuple[list[str], list[str]]:
    """A seeded split: ``frac`` of the queries get rewards, the rest are evaluated."""
    perm = np.random.default_rng(seed).permutation(len(qids))
    n = int(round(frac * len(qids)))
    return [qids[i] for i in sorted(perm[:n])], [qids[i] for i in sorted(perm[n:])]


def export_demo(out: PathLike, *, modules: Sequence[str] = (),
                overwrite: bool = False) -> Path:
    """Write the demo task (this Python's docstrings, the shipped questions and labels) as a
    BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv. Written whole or not at all.

        >>> export_demo("data/stdlib-docs")
    """
    import json

    from tttembed.core.io import atomic_directory, refuse_existing, write_text
    from tttembed.demo.corpus import demo_task

    out = refuse_existing(out, overwrite, "folder")
    task = demo_task(tuple(modules)) if modules else demo_task()
    with atomic_directory(out) as tmp:
        write_text(tmp / "corpus.jsonl", "".join(
            json.dumps({"_id": d, "title": doc.get("title", ""), "text": doc["text"]},
                       ensure_ascii=False) + "\n" for d, doc in task.corpus.items()))
        write_text(tmp / "queries.jsonl", "".join(
            json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
            for q, t in task.queries.items()))
        write_text(tmp / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{g}\n" for q, docs in task.qrels.items() for d, g in docs.items()))
    return out


@dataclass(frozen=True)
class DemoResult:
    """What the demo did: sizes, the raw run, and raw vs adapted on the judged questions
    asked again (``seen_*``) and on the unseen ones."""

    workdir: Path
    n_docs: int
    dropped_labels: int
    qrels: dict[str, dict[str, int]] = field(repr=False)
    raw_run: dict[str, dict[str, float]] = field(repr=False)
    state: AdaptState = field(repr=False)
    learn_ids: list[str] = field(repr=False)
    test_ids: list[str] = field(repr=False)
    unseen_runs: dict[str, dict[str, dict[str, float]]] = field(repr=False)
    comparison: Any = None
    model_calls: int = 0
    seen_runs: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict, repr=False)
    seen_comparison: Any = None


def run_demo(*, embedder: str = DEFAULT_EMBEDDER, workdir: PathLike | None = None,
             cache_dir: PathLike | None = None, k: int = 100,
             budget: float = 10.0, seed: int = 0, modules: Sequence[str] = (),
             progress: Progress | None = None) -> DemoResult:
    """Run the whole job offline; the demo's own folder (default ``<cache>/demo``) is
    rewritten each run.

        >>> from tttembed.demo.run import run_demo
        >>> result = run_demo()
        >>> result.comparison.delta
    """
    from tttembed.core.paths import cache_dir as default_cache
    from tttembed.demo.corpus import demo_task
    from tttembed.embed.cache import load_embedder
    from tttembed.index.search import write_run
    from tttembed.score.qrels import QrelsScorer
    from tttembed.ttt.index import index_corpus
    from tttembed.ttt.learn import learn
    from tttembed.ttt.search import search

    work = Path(workdir) if workdir else default_cache(cache_dir) / "demo"
    task = demo_task(tuple(modules)) if modules else demo_task()
    if not task.queries:
        raise ConfigError(f"no shipped question has its labels inside modules {list(modules)}; "
                          "add more modules or drop --modules")
    emb = load_embedder(embedder, cache_dir=cache_dir)
    index = index_corpus(task.corpus, work / "index", embedder=emb, overwrite=True,
                             progress=progress)
    raw = search(index, task.queries, k=k, task=TASK, embedder=emb).to_run()
    write_run(raw, work / "raw.trec")
    learn_ids, test_ids = split_queries(list(task.queries), 0.8, seed)
    scorer = QrelsScorer("demo-labels", qrels={q: task.qrels[q] for q in learn_ids})
    state = learn(index, {q: task.queries[q] for q in learn_ids}, scorer=scorer,
                  budget=budget, task=TASK, embedder=emb, corpus=task.corpus,
                  method="auto", progress=progress)
    state.save(work / "vectors.npz", overwrite=True)
    seen = _raw_and_adapted(index, {q: task.queries[q] for q in learn_ids}, state, emb, k)
    unseen = _raw_and_adapted(index, {q: task.queries[q] for q in test_ids}, state, emb, k)
    stage(progress, "done", 1)(1)
    return DemoResult(work, len(task.corpus), task.dropped_labels, task.qrels, raw, state,
                      learn_ids, test_ids, unseen,
                      _compare(unseen, {q: task.qrels[q] for q in test_ids}),
                      int(getattr(emb, "model_calls", 0)), seen,
                      _compare(seen, {q: task.qrels[q] for q in learn_ids}))


ADAPTED = "adapted (method auto)"


def _raw_and_adapted(index: Any, queries: dict[str, str], state: AdaptState, emb: Any,
                     k: int) -> dict[str, dict[str, dict[str, float]]]:
    from tttembed.ttt.search import search

    return {"raw": search(index, queries, k=k, task=TASK, embedder=emb).to_run(),
            ADAPTED: search(index, queries, k=k, task=TASK, embedder=emb,
                            states=[state]).to_run()}


def _compare(runs: dict[str, dict[str, dict[str, float]]],
             qrels: dict[str, dict[str, int]]) -> Any:
    from tttembed.metrics.ranking import per_query_metrics
    from tttembed.metrics.stats import compare

    per_q = {n: per_query_metrics(qrels, r, ("ndcg@10",))["ndcg@10"] for n, r in runs.items()}
    return compare(per_q[ADAPTED], per_q["raw"])
