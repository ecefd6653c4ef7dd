"""``tttembed eval`` as a function: tasks -> indexes -> protocols -> numbers.

Everything expensive is cached and counted: document and query vectors (the embedding
cache), indexes (``<cache>/eval/indexes``), rewards (the SQLite ledger; ``qrels`` is free)
and each protocol cell's per-query metrics (``<cache>/eval/cells/<key>.json``, keyed by
the embedder identity, task fingerprints, scorer identity, the cell's settings and the
tttembed version). A second run of the same configuration makes zero embedding and zero
scorer calls; ``counts`` in the result says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tttembed.adapt.allocate import NORMALISED_BUDGETS, budget_grid
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.core.errors import ConfigError
from tttembed.evaluate import analyses as A
from tttembed.evaluate import protocols as P
from tttembed.evaluate.report import summarise
from tttembed.evaluate.tasks import EvalTask, load_eval_tasks, task_index
from tttembed.reporting import versions

PROTOCOLS = ("fixed", "heldout", "loto")
ANALYSES = ("alpha", "breadth-depth", "objectives")
Stage = Callable[[str, int | None], Callable[[int], None]]
#: Bump when a protocol's numbers change for the same inputs (invalidates cached cells).
CELLS_VERSION = 2


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate; every field is recorded in results.json."""

    tasks: tuple[str, ...]
    embedder: str = DEFAULT_EMBEDDER
    scorers: tuple[str, ...] = ("bm25",)
    scopes: tuple[str, ...] = P.SCOPE_METHODS
    budgets: tuple[float, ...] = NORMALISED_BUDGETS
    protocols: tuple[str, ...] = ("fixed",)
    analyses: tuple[str, ...] = ()
    baselines: tuple[str, ...] = P.BASELINES
    objective: str = "kd"
    split: str = "test"
    train_split: str | None = None
    heldout_fraction: float = 0.8
    data_root: str | None = None
    cache_dir: str | None = None
    n_resamples: int = 10000
    few_queries: int = 50

    def __post_init__(self) -> None:
        from tttembed.adapt import check_objective, check_scope

        for s in self.scopes:
            check_scope(s)
        check_objective(self.objective)
        for p in self.protocols:
            if p not in PROTOCOLS:
                raise ConfigError(f"unknown protocol {p!r}; choose from {', '.join(PROTOCOLS)}")
        for a in self.analyses:
            if a not in ANALYSES:
                raise ConfigError(f"unknown analysis {a!r}; choose from {', '.join(ANALYSES)}")
        for b in self.baselines:
            if b not in P.BASELINES:
                raise ConfigError(f"unknown baseline {b!r}; choose from {', '.join(P.BASELINES)}")
        if not self.scorers:
            raise ConfigError("give at least one --scorer")
        if any(b <= 0 for b in self.budgets):
            raise ConfigError("budgets are normalised pairs per query and must be > 0")


def is_label_scorer(spec: str) -> bool:
    return spec.split(":", 1)[0] == "qrels"


class CellCache:
    """Per-query metrics of protocol cells as JSON files; ``hits``/``misses`` counted."""

    def __init__(self, root: Path | None, base: Mapping[str, Any]) -> None:
        self.root = root
        self.base = dict(base)
        self.hits = self.misses = 0
        self.seconds = 0.0

    def key(self, parts: Mapping[str, Any]) -> str:
        blob = json.dumps({**self.base, **parts}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def __call__(self, parts: Mapping[str, Any], compute: Callable[[], P.PerQuery]) -> P.PerQuery:
        path = None if self.root is None else self.root / f"{self.key(parts)}.json"
        if path is not None and path.is_file():
            try:
                got = json.loads(path.read_text())
                self.hits += 1
                return got
            except (OSError, json.JSONDecodeError):
                pass
        t = time.perf_counter()
        value = compute()
        self.seconds += time.perf_counter() - t
        self.misses += 1
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(value))
            os.replace(tmp, path)
        return value


@dataclass
class Workload:
    tasks: list[EvalTask]
    data: list[P.TaskData]
    embedder: Any
    timings: dict[str, float] = field(default_factory=dict)


def prepare(cfg: EvalConfig, stage: Stage | None = None, embedder: Any = None) -> Workload:
    """Load the tasks, open (or build) one cached index per task, retrieve the base top-100."""
    from tttembed import api
    from tttembed.ttt.queries import QuerySet, base_retrieval

    t0 = time.perf_counter()
    tasks = load_eval_tasks(cfg.tasks, data_root=cfg.data_root, split=cfg.split,
                            train_split=cfg.train_split)
    emb = embedder if embedder is not None else api.load_embedder(cfg.embedder,
                                                                   cache_dir=cfg.cache_dir)
    timings = {"load_tasks": time.perf_counter() - t0}
    data = []
    t1 = time.perf_counter()
    for task in tasks:
        bar = stage(f"index {task.name}", len(task.corpus)) if stage else None
        index = task_index(task, emb, cfg.cache_dir, progress=bar)
        queries = QuerySet.from_tasks({task.name: task.queries})
        base = base_retrieval(index, emb, queries, P.EVAL_DEPTH)
        train = train_base = None
        if task.train_queries:
            train = QuerySet.from_tasks({task.name: task.train_queries})
            train_base = base_retrieval(index, emb, train, P.EVAL_DEPTH)
        data.append(P.TaskData(task.name, index, task.corpus, queries, task.qrels, base,
                               train, train_base))
    timings["index_and_retrieve"] = time.perf_counter() - t1
    return Workload(tasks, data, emb, timings)


class RewardSource:
    """``rewards_for(pairs)`` over a workload for one scorer spec: one scorer per task
    (``bm25`` gets the task's corpus, ``qrels`` the task's judgments of every split),
    through the ledger; paid pairs counted."""

    def __init__(self, spec: str, work: Workload, cfg: EvalConfig) -> None:
        self.spec = spec
        self.work = work
        self.cfg = cfg
        self._scorers: dict[str, Any] = {}
        self.requested = 0
        self.seconds = 0.0

    def scorer(self, task: EvalTask) -> Any:
        from tttembed.ttt.learn import build_scorer

        scheme = self.spec.split(":", 1)[0]
        name = task.name if scheme in ("bm25", "qrels") else "*"
        if name not in self._scorers:
            if scheme == "qrels":
                judged = {**task.train_qrels, **task.qrels}
                sc = build_scorer(f"qrels:{task.source}", task.corpus, qrels=judged)
            else:
                sc = build_scorer(self.spec, task.corpus, cache_dir=self.cfg.cache_dir)
            self._scorers[name] = sc
        return self._scorers[name]

    def identity(self) -> str:
        if is_label_scorer(self.spec):
            return "qrels"
        return getattr(self.scorer(self.work.tasks[0]), "identity", self.spec)

    @property
    def paid(self) -> int:
        return sum(int(getattr(s, "paid", 0)) for s in self._scorers.values())

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> P.Rewards:
        from tttembed.ttt.queries import QuerySet, score_pairs

        t = time.perf_counter()
        by_task: dict[str, list[tuple[str, str]]] = {}
        for key, did in pairs:
            by_task.setdefault(key.split("/", 1)[0], []).append((key, did))
        out: P.Rewards = {}
        for task in self.work.tasks:
            got = by_task.get(task.name)
            if not got:
                continue
            qs = QuerySet.from_tasks({task.name: {**task.train_queries, **task.queries}})
            out.update(score_pairs(got, qs, task.corpus, self.scorer(task)))
        self.requested += len(pairs)
        self.seconds += time.perf_counter() - t
        return out


#: Distributions whose versions results.json records (besides tttembed and python).
VERSIONED = ("numpy", "faiss-cpu", "faiss-gpu", "torch", "sentence-transformers",
             "transformers", "bm25s")


def run_eval(cfg: EvalConfig, stage: Stage | None = None, embedder: Any = None,
             use_cell_cache: bool = True) -> dict[str, Any]:
    """Run every protocol and analysis for every scorer; a JSON-ready result."""
    from tttembed.core.paths import cache_dir

    t_start = time.perf_counter()
    work = prepare(cfg, stage, embedder)
    emb = work.embedder
    calls0 = int(getattr(emb, "model_calls", 0))
    fingerprints = {t.name: t.fingerprint for t in work.tasks}
    cells_root = cache_dir(cfg.cache_dir) / "eval" / "cells" if use_cell_cache else None
    sections: list[dict[str, Any]] = []
    counts: dict[str, Any] = {"scorer_paid": 0, "reward_pairs_requested": 0,
                              "cells_cached": 0, "cells_computed": 0}
    timings = dict(work.timings)
    raw_all = P.raw_metrics(work.data)
    for spec in cfg.scorers:
        src = RewardSource(spec, work, cfg)
        base = {"embedder": emb.identity, "tasks": fingerprints,
                "queries": [len(t.queries) for t in work.tasks], "scorer": src.identity(),
                "split": cfg.split, "version": versions(())["tttembed"],
                "cells": CELLS_VERSION}
        if cfg.train_split:
            base["train_split"] = cfg.train_split
        cells = CellCache(cells_root, base)
        label = is_label_scorer(spec)
        results: list[P.MethodResult] = []
        notes: list[str] = []
        for proto in cfg.protocols:
            if proto == "fixed":
                if label:
                    notes.append("fixed protocol skipped for the qrels scorer: its judged "
                                 "queries would be evaluated (use heldout or loto)")
                    continue
                n = sum(len(t.queries) for t in work.tasks)
                bar = stage(f"fixed [{spec}]", len(budget_grid(n, cfg.budgets))) if stage else None
                results += P.fixed_population(work.data, src, budgets=cfg.budgets,
                                              scopes=cfg.scopes, baselines=cfg.baselines,
                                              objective=cfg.objective, cells=cells,
                                              progress=bar)
            elif proto == "heldout":
                results += P.heldout(work.data, src, fraction=cfg.heldout_fraction,
                                     scopes=[s for s in cfg.scopes if s != "query"],
                                     objective=cfg.objective, cells=cells,
                                     use_train=cfg.train_split is not None)
            elif proto == "loto":
                if len(work.data) < 2:
                    notes.append("leave-one-task-out skipped: it needs two tasks or more")
                    continue
                results += P.leave_one_task_out(work.data, src, objective=cfg.objective,
                                                cells=cells)
        for analysis in cfg.analyses:
            if analysis == "alpha":
                results += A.alpha_ablation(work.data, src, objective=cfg.objective,
                                            heldout_eval=label, cells=cells)
            elif label:
                notes.append(f"{analysis} skipped for the qrels scorer (it would evaluate "
                             "judged queries)")
            elif analysis == "breadth-depth":
                results += A.breadth_depth(work.data, src, objective=cfg.objective, cells=cells)
            elif analysis == "objectives":
                results += A.objective_comparison(work.data, src, scopes=cfg.scopes, cells=cells)
        t_sum = time.perf_counter()
        summary = summarise(results, raw_all, n_resamples=cfg.n_resamples,
                            few_queries=cfg.few_queries)
        timings[f"tests_and_summary[{spec}]"] = time.perf_counter() - t_sum
        sections.append({"scorer": spec, "scorer_identity": src.identity(), "notes": notes,
                         **summary})
        counts["scorer_paid"] += src.paid
        counts["reward_pairs_requested"] += src.requested
        counts["cells_cached"] += cells.hits
        counts["cells_computed"] += cells.misses
        timings[f"scoring[{spec}]"] = src.seconds
        timings[f"learn_and_search[{spec}]"] = cells.seconds - src.seconds
    counts["embedding_model_calls"] = int(getattr(emb, "model_calls", 0))
    counts["texts_embedded"] = int(getattr(emb, "texts_embedded", 0))
    counts["embedding_model_calls_after_indexing"] = counts["embedding_model_calls"] - calls0
    timings["total"] = time.perf_counter() - t_start
    return {
        "format": "tttembed-eval/1",
        "config": asdict(cfg),
        "versions": versions(VERSIONED),
        "embedder_identity": emb.identity,
        "tasks": [{"name": t.name, "source": t.source, "split": t.split,
                   "corpus_fingerprint": t.fingerprint, "documents": len(t.corpus),
                   "queries": len(t.queries), "train_queries": len(t.train_queries),
                   "few_queries": len(t.queries) < cfg.few_queries} for t in work.tasks],
        "raw": {"per_task": summary_raw(raw_all)},
        "sections": sections,
        "counts": counts,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
    }


def summary_raw(raw: P.PerQuery) -> dict[str, dict[str, float]]:
    from tttembed.evaluate.report import by_task

    out: dict[str, dict[str, float]] = {}
    for metric, values in raw.items():
        for task, vals in by_task(values).items():
            out.setdefault(task, {})[metric] = sum(vals.values()) / len(vals)
    return out
