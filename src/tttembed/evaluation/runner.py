"""``tttembed eval`` as a function: tasks -> indexes -> protocols -> numbers.

Everything expensive is cached and counted: document and query vectors (the embedding
cache), indexes (``<cache>/eval/indexes``), rewards (the SQLite ledger; ``qrels`` is free)
and each protocol cell's per-query metrics (``<cache>/eval/cells/<key>.json``, keyed by
the embedder identity, task fingerprints, scorer identity, the cell's settings and the
tttembed version). A second run of the same configuration makes zero embedding and zero
scorer calls; ``counts`` in the result says so.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tttembed.adapt.allocate import BREADTH_DEPTH, budget_grid
from tttembed.core.errors import DataError
from tttembed.core.http import HttpLimits
from tttembed.core.io import DISTRIBUTIONS, json_hash, read_json, versions, write_text
from tttembed.core.progress import Progress, stage
from tttembed.data.beir import Task
from tttembed.embed.base import Embedder
from tttembed.evaluation import analyses as A
from tttembed.evaluation import protocols as P
from tttembed.evaluation.config import CELL_METRICS, EvalConfig
from tttembed.evaluation.report import summarise
from tttembed.evaluation.reward_source import SIMULATION_NOTE, RewardSource
from tttembed.evaluation.tasks import load_eval_tasks, task_index
from tttembed.evaluation.workload import EVAL_DEPTH, PerQuery, TaskData, Workload
from tttembed.metrics.stats import ComparisonCache

log = logging.getLogger(__name__)
#: Bump when a protocol's numbers change for the same inputs (invalidates cached cells).
CELLS_VERSION = 2


def valid_cell(value: Any) -> bool:
    """A cached cell is ``{metric: {"task/qid": number}}`` for every metric."""
    return (isinstance(value, dict) and set(CELL_METRICS) <= set(value)
            and all(isinstance(value[m], dict) and value[m] and all(
                isinstance(v, (int, float)) and not isinstance(v, bool)
                for v in value[m].values()) for m in CELL_METRICS))


def check_finite_cell(value: PerQuery, path: Path) -> None:
    """Refuse a cached cell holding a NaN or infinite per-query value, naming the file."""
    for metric, per_query in value.items():
        for key, v in per_query.items():
            if not math.isfinite(v):
                raise DataError(f"cached evaluation cell holds {v} for {metric} of query "
                                f"{key}", path=path,
                                fix="delete the file; the next run recomputes it")


class CellCache:
    """Per-query metrics of protocol cells as JSON files; ``hits``/``misses`` counted."""

    def __init__(self, root: Path | None, base: Mapping[str, Any]) -> None:
        self.root = root
        self.base = dict(base)
        self.hits = self.misses = 0
        self.seconds = 0.0

    def key(self, parts: Mapping[str, Any]) -> str:
        return json_hash({**self.base, **parts})

    def __call__(self, parts: Mapping[str, Any], compute: Callable[[], PerQuery]) -> PerQuery:
        path = None if self.root is None else self.root / f"{self.key(parts)}.json"
        if path is not None and path.is_file():
            try:
                got: PerQuery = read_json(path, what="cached evaluation cell")
                if not valid_cell(got):
                    raise DataError("not a per-query metrics table", path=path)
            except DataError as exc:  # a corrupt cell is recomputed and rewritten
                log.warning("recomputing a corrupt evaluation cell: %s", exc)
            else:
                check_finite_cell(got, path)
                self.hits += 1
                return got
        t = time.perf_counter()
        value = compute()
        self.seconds += time.perf_counter() - t
        self.misses += 1
        if path is not None:  # key order kept: sums over it must not move a last bit
            write_text(path, json.dumps(value))
        return value


def prepare_workload(cfg: EvalConfig, progress: Progress | None = None,
                     embedder: Embedder | None = None) -> Workload:
    """Load the tasks, open (or build) one cached index per task, retrieve the base top-100."""
    from tttembed.embed.cache import load_embedder
    from tttembed.ttt import QuerySet, base_retrieval

    t0 = time.perf_counter()
    tasks = load_eval_tasks(cfg.tasks, data_root=cfg.data_root, split=cfg.split,
                            train_split=cfg.train_split)
    emb = embedder if embedder is not None else load_embedder(
        cfg.embedder, cache_dir=cfg.cache_dir,
        **HttpLimits(cfg.limits.timeout, cfg.limits.max_retries).options(cfg.embedder))
    timings = {"load_tasks": time.perf_counter() - t0}
    data = []
    t1 = time.perf_counter()
    for task in tasks:
        bar = stage(progress, f"index {task.name}", len(task.corpus))
        index = task_index(task, emb, cfg.cache_dir, progress=bar)
        drop = [task.name] if identical_ids(cfg, task) else []
        why = {task.name: identical_why(cfg, task)}
        queries = QuerySet.from_tasks({task.name: task.queries}, drop_identical=drop,
                                      identical_why=why)
        base = base_retrieval(index, emb, queries, EVAL_DEPTH)
        train = train_base = None
        if task.train_queries:
            train = QuerySet.from_tasks({task.name: task.train_queries}, drop_identical=drop,
                                        identical_why=why)
            train_base = base_retrieval(index, emb, train, EVAL_DEPTH)
        data.append(TaskData(task.name, index, task.corpus, queries, task.qrels, base,
                               train, train_base))
    timings["index_and_retrieve"] = time.perf_counter() - t1
    return Workload(tasks, data, emb, timings)


def identical_ids(cfg: EvalConfig, task: Task) -> bool:
    """Whether ``task``'s rankings leave out the query's own document: as asked, else as
    its data says (:func:`tttembed.data.beir.identical_ids_rule`)."""
    return (task.ignore_identical_ids if cfg.ignore_identical_ids is None
            else cfg.ignore_identical_ids)


def identical_why(cfg: EvalConfig, task: Task) -> str:
    """``on (why)`` / ``off (why)``: :func:`identical_ids` and where it came from (the
    flag, the folder's ``tttembed-task.json``, the benchmark's setting for its name)."""
    from tttembed.ttt.queries import identical_rule

    on = identical_ids(cfg, task)
    root = task.root if task.root is not None and task.root.is_dir() else None
    why = identical_rule(task.name, cfg.ignore_identical_ids, root)
    return why if why.startswith("on" if on else "off") else ("on" if on else "off")


def _protocols(cfg: EvalConfig, work: Workload, src: RewardSource, cells: CellCache,
               progress: Progress | None, info: dict[str, Any] | None = None
               ) -> tuple[list[P.MethodResult], list[str]]:
    """Every asked protocol for one scorer (label scorers skip the fixed population,
    except a controlled simulation such as noisy-qrels, which runs it with a note)."""
    label = src.caps.uses_labels and not src.simulation
    results: list[P.MethodResult] = []
    notes: list[str] = []
    for proto in cfg.protocols:
        if proto == "fixed" and label:
            notes.append("fixed protocol skipped for the qrels scorer: its judged "
                         "queries would be evaluated (use heldout or loto)")
        elif proto == "fixed":
            n = sum(len(t.queries) for t in work.tasks)
            bar = stage(progress, f"fixed [{src.spec}]", len(budget_grid(n, cfg.budgets)))
            notes += P.skipped_budgets(work.data, cfg.budgets)
            if src.caps.uses_labels:
                notes.append(SIMULATION_NOTE)
            if "qdrant-rf" in cfg.baselines:
                notes.append("qdrant-rf coefficients: " + (
                    "cross-fit on the other half of the evaluated queries (a label scorer "
                    "cannot judge synthetic document-queries)" if src.caps.uses_labels else
                    "fitted on synthetic document-queries of each task's corpus"))
            results += P.fixed_population(work.data, src, budgets=cfg.budgets,
                                          scopes=cfg.scopes, baselines=cfg.baselines,
                                          objective=cfg.objective, cells=cells, progress=bar,
                                          alphas=cfg.alphas, info=info, selects=cfg.selects,
                                          allocations=cfg.allocations,
                                          judge=None if src.caps.uses_labels else src.judge)
        elif proto == "heldout":
            source = (f"the {cfg.train_split} split" if cfg.train_split else
                      f"{cfg.heldout_fraction:.0%} of each task's judged queries")
            notes.append(f"heldout: learns from every query of {source} at depth "
                         f"{BREADTH_DEPTH} (its b and B are in its rows); --budget applies "
                         "to the fixed protocol only")
            results += P.heldout(work.data, src, fraction=cfg.heldout_fraction,
                                 scopes=[s for s in cfg.scopes if s != "query"],
                                 objective=cfg.objective, cells=cells,
                                 use_train=cfg.train_split is not None, alphas=cfg.alphas,
                                 selects=cfg.selects)
        elif len(work.data) < 2:
            notes.append("leave-one-task-out skipped: it needs two tasks or more")
        elif cfg.selects and proto == "loto":
            notes.append("--select auto: no auto row in leave-one-task-out (its state is "
                         "the global one by design)")
            results += P.leave_one_task_out(work.data, src, objective=cfg.objective,
                                            cells=cells, alphas=cfg.alphas)
        else:
            results += P.leave_one_task_out(work.data, src, objective=cfg.objective,
                                            cells=cells, alphas=cfg.alphas)
    return results, notes


def _analyses(cfg: EvalConfig, work: Workload, src: RewardSource, cells: CellCache
              ) -> tuple[list[P.MethodResult], list[str]]:
    label = src.caps.uses_labels
    results: list[P.MethodResult] = []
    notes: list[str] = []
    for analysis in cfg.analyses:
        if analysis == "alpha":
            results += A.alpha_ablation(work.data, src, objective=cfg.objective,
                                        heldout_eval=label, cells=cells,
                                        auto="auto" in cfg.alphas)
        elif label:
            notes.append(f"{analysis} skipped for the qrels scorer (it would evaluate "
                         "judged queries)")
        elif analysis == "breadth-depth":
            results += A.breadth_depth(work.data, src, objective=cfg.objective, cells=cells)
        elif analysis == "objectives":
            results += A.objective_comparison(work.data, src, scopes=cfg.scopes, cells=cells)
    return results, notes


def _cells(cfg: EvalConfig, work: Workload, src: RewardSource, use_cell_cache: bool
           ) -> CellCache:
    from tttembed.core.paths import cache_dir

    root = cache_dir(cfg.cache_dir) / "eval" / "cells" if use_cell_cache else None
    base = {"embedder": work.embedder.identity,
            "tasks": {t.name: t.fingerprint for t in work.tasks},
            "queries": [len(t.queries) for t in work.tasks], "scorer": src.identity(),
            "split": cfg.split, "version": versions(())["tttembed"], "cells": CELLS_VERSION}
    if cfg.train_split:
        base["train_split"] = cfg.train_split
    identical = sorted(t.name for t in work.tasks if identical_ids(cfg, t))
    if identical:  # other keys as before: cells cached without the rule stay valid
        base["ignore_identical_ids"] = identical
    return CellCache(root, base)


def _comparisons(cfg: EvalConfig, use_cache: bool) -> ComparisonCache:
    """Paired tests kept next to the cells (``<cache>/eval/comparisons``), or in memory."""
    from tttembed.core.paths import cache_dir

    return ComparisonCache(cache_dir(cfg.cache_dir) / "eval" / "comparisons" if use_cache
                           else None)


def _section(cfg: EvalConfig, work: Workload, spec: str, raw_all: PerQuery,
             counts: dict[str, Any], timings: dict[str, float], use_cell_cache: bool,
             progress: Progress | None) -> dict[str, Any]:
    """One scorer's protocols, analyses and summary; adds to ``counts`` and ``timings``."""
    src = RewardSource(spec, work, cfg)
    cells = _cells(cfg, work, src, use_cell_cache)
    info: dict[str, Any] = {}
    results, notes = _protocols(cfg, work, src, cells, progress, info)
    more, more_notes = _analyses(cfg, work, src, cells)
    t_sum = time.perf_counter()
    tests = _comparisons(cfg, use_cell_cache)
    summary = summarise(results + more, raw_all, n_resamples=cfg.n_resamples,
                        few_queries=cfg.few_queries, cache=tests)
    counts["comparisons_cached"] = counts.get("comparisons_cached", 0) + tests.hits
    counts["comparisons_computed"] = counts.get("comparisons_computed", 0) + tests.misses
    timings[f"tests_and_summary[{spec}]"] = time.perf_counter() - t_sum
    counts["scorer_paid"] += src.paid
    counts["reward_pairs_requested"] += src.requested
    counts["cells_cached"] += cells.hits
    counts["cells_computed"] += cells.misses
    timings[f"scoring[{spec}]"] = src.seconds
    timings[f"learn_and_search[{spec}]"] = cells.seconds - src.seconds
    return {"scorer": spec, "scorer_identity": src.identity(),
            "notes": src.notes + notes + more_notes,
            **summary, **info}


def run_eval(cfg: EvalConfig, progress: Progress | None = None,
             embedder: Embedder | None = None, use_cell_cache: bool = True) -> dict[str, Any]:
    """Run every protocol and analysis for every scorer; a JSON-ready result."""
    t_start = time.perf_counter()
    work = prepare_workload(cfg, progress, embedder)
    emb = work.embedder
    calls0 = int(getattr(emb, "model_calls", 0))
    counts: dict[str, Any] = {"scorer_paid": 0, "reward_pairs_requested": 0,
                              "cells_cached": 0, "cells_computed": 0}
    timings = dict(work.timings)
    raw_all = P.raw_metrics(work.data)
    sections = [_section(cfg, work, spec, raw_all, counts, timings, use_cell_cache, progress)
                for spec in cfg.scorers]
    counts["embedding_model_calls"] = int(getattr(emb, "model_calls", 0))
    counts["texts_embedded"] = int(getattr(emb, "texts_embedded", 0))
    counts["embedding_model_calls_after_indexing"] = counts["embedding_model_calls"] - calls0
    timings["total"] = time.perf_counter() - t_start
    return {
        "format": "tttembed-eval/1",
        "config": asdict(cfg),
        "versions": versions(DISTRIBUTIONS),
        "embedder_identity": emb.identity,
        "tasks": [{"name": t.name, "source": t.source, "split": t.split,
                   "corpus_fingerprint": t.fingerprint, "documents": len(t.corpus),
                   "queries": len(t.queries), "train_queries": len(t.train_queries),
                   "few_queries": len(t.queries) < cfg.few_queries,
                   "ignore_identical_ids": identical_ids(cfg, t),
                   "ignore_identical_ids_why": identical_why(cfg, t)} for t in work.tasks],
        "raw": {"per_task": summary_raw(raw_all)},
        "sections": sections,
        "counts": counts,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
    }


def summary_raw(raw: PerQuery) -> dict[str, dict[str, float]]:
    from tttembed.evaluation.report import by_task

    out: dict[str, dict[str, float]] = {}
    for metric, values in raw.items():
        for task, vals in by_task(values).items():
            out.setdefault(task, {})[metric] = sum(vals.values()) / len(vals)
    return out
