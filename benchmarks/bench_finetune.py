"""States against fine-tuning the embedder, on exactly the same judged pairs.

    python benchmarks/bench_finetune.py --data ../shared/data/scifact --budget 10 \\
        --json docs/results/finetune/scifact-b10.json [--index IDX] [--methods ...]
        [--triplets FILE] [--train-split train] [--test-split test] [--work DIR]

The train questions are judged once, at b = ``--budget`` per question, by the qrels judge
through a fresh reward ledger (as a paid judge's would be), by ``learn --method auto`` itself (its guard's validation
pairs included): that learn is the ``states`` row, and the ledger it filled is the pairs
every other row learns from (:mod:`tttembed.tune.export` reads them back, as
``tttembed pairs export`` does). Then, from those pairs only:

- ``states``: ``--method auto`` (today's product), applied to the test questions;
- ``query-lora``: a LoRA adapter on the query side of the embedder, trained on the pairs'
  triplets (contrastive: in-batch + the judged hard negatives); the index is unchanged;
- ``full-finetune``: the whole embedder fine-tuned with the same loss, the corpus
  re-embedded and re-indexed;
- ``full-finetune+states``: ``--method auto`` learned afresh on the re-indexed corpus from
  the same ledger, answering only the pairs it holds (nothing new is paid).

Each row: nDCG@10 on the test questions (never judged) with the paired test against raw,
seconds training and re-embedding, core-seconds in total (this process's CPU time over
the row, every thread), and the bytes the row adds (a state file, an adapter, a model and
an index). The settings (:mod:`tttembed.tune.train`'s defaults) are fixed before any run
and written in the JSON; ``--triplets FILE`` trains the fine-tunes on an exported triplet
file instead of the pairs in memory (the same rows give the same figures). The run of
each row (its top 10, all that nDCG@10 reads) is written beside the JSON as
``<stem>.<row>.trec``.

Goal (issue 78): the states' gain on new questions >= 50% of the best fine-tune's gain at
<= 1/20 of its core-seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _support import ROOT, write_json  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

import claims  # noqa: E402

METHODS = ("states", "query-lora", "full-finetune", "full-finetune+states")
GOALS = {
    "share": claims.Goal("states' gain / best fine-tune's gain on new questions", ">=", 0.5),
    "cost": claims.Goal("states' core-seconds / best fine-tune's", "<=", 0.05),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a BEIR folder with a train "
                    "and a test split (qrels/train.tsv, qrels/test.tsv)")
    ap.add_argument("--budget", type=float, default=10.0, help="judged pairs per train "
                    "question (b)")
    ap.add_argument("--json", type=Path, required=True, help="where the results go; the run "
                    "files go beside it")
    ap.add_argument("--index", type=Path, default=None, help="an index of --data's corpus "
                    "built with the default embedder (else one is built in --work)")
    ap.add_argument("--methods", default=",".join(METHODS), help="a subset of "
                    + ", ".join(METHODS))
    ap.add_argument("--triplets", type=Path, default=None, help="train the fine-tunes on "
                    "this exported triplet file ('tttembed pairs export --format triplets')")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--test-split", default="test")
    ap.add_argument("--work", type=Path, default=None, help="folder for the ledger, models "
                    "and indexes (default: beside --json, <stem>.work)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--select", action="store_true", help="choose the fine-tunes' settings "
                    "instead: split the train questions by text (80%% fit, 20%% check), run "
                    "each candidate of the grid on them, write the table and the choice to "
                    "--json (no test question is read)")
    ap.add_argument("--hyperparameters", type=Path, default=None, help="a --select JSON: "
                    "train with its chosen settings (default: the trainer's defaults)")
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    bad = sorted(set(methods) - set(METHODS))
    if bad or not methods:
        ap.error(f"--methods: unknown {', '.join(bad) or '(none)'}; known: {', '.join(METHODS)}")
    if not (args.data / "qrels" / f"{args.train_split}.tsv").is_file() or \
            not (args.data / "qrels" / f"{args.test_split}.tsv").is_file():
        ap.error(f"--data {args.data}: needs qrels/{args.train_split}.tsv and "
                 f"qrels/{args.test_split}.tsv")
    if args.budget <= 0:
        ap.error("--budget must be positive")
    for name in ("triplets", "hyperparameters"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            ap.error(f"--{name} {path}: no such file")
    args.methods = methods
    return args


class Clock:
    """Wall seconds and this process's CPU seconds (every thread) since it started."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def split(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import tttembed as tt

        self.tt, self.args = tt, args
        self.work = args.work or args.json.with_suffix(".work")
        self.work.mkdir(parents=True, exist_ok=True)
        self.ledger = self.work / "ledger.sqlite"
        self.ledger.unlink(missing_ok=True)
        self.scorer_spec = f"qrels:{args.data / 'qrels' / (args.train_split + '.tsv')}"
        self.settings = settings_from(args.hyperparameters)
        self.rows: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, str] = {}
        self.per_query: dict[str, dict[str, float]] = {}

    # -- the index and the test metric -------------------------------------------------------
    def raw_index(self) -> Any:
        if self.args.index is not None:
            return self.tt.open_index(self.args.index)
        out = self.work / "raw-index"
        clock = Clock()
        index = self.tt.index_corpus(self.args.data, out, overwrite=True)
        self.raw_index_s = clock.split()[0]
        return index

    def measure(self, name: str, result: Any) -> float:
        from tttembed.index.search import write_run

        run = result.to_run()
        qrels = {q: g for t in result.qrels.values() for q, g in t.items()}
        per = self.tt.per_query_metric(qrels, run, "ndcg@10")
        self.per_query[name] = per
        path = self.args.json.with_name(f"{self.args.json.stem}.{name}.trec")
        top = {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:10]) for q, d in run.items()}
        write_run(top, path, tag=name)  # the top 10: all that nDCG@10 reads
        self.runs[name] = path.name
        return sum(per.values()) / max(1, len(per))

    def test_search(self, index: Any, states: list[Any] = ()) -> Any:
        return self.tt.search(index, self.args.data, split=self.args.test_split,
                              states=list(states), k=100)

    def row(self, name: str, ndcg: float, train_s: float, reembed_s: float, core_s: float,
            nbytes: int, **extra: Any) -> None:
        cmp = self.tt.compare(self.per_query[name], self.per_query["raw"])
        self.rows[name] = {"ndcg10": ndcg, "delta": cmp.delta, "p": cmp.p_value,
                           "ci": [cmp.ci_low, cmp.ci_high], "n": cmp.n, "train_s": train_s,
                           "reembed_s": reembed_s, "core_s": core_s, "bytes": nbytes, **extra}
        print(f"{name:>22}: nDCG@10 {ndcg:.4f} ({cmp.delta:+.4f}, p {cmp.p_value:.4f}); "
              f"train {train_s:.1f} s, re-embed {reembed_s:.1f} s, {core_s:.1f} core-s, "
              f"{nbytes / 1e6:.2f} MB", flush=True)

    # -- the rows ----------------------------------------------------------------------------
    def learn_states(self, index: Any, scorer: Any) -> Any:
        return self.tt.learn(index, self.args.data, scorer=scorer, method="auto",
                             budget=self.args.budget, split=self.args.train_split,
                             seed=self.args.seed)

    def states(self, index: Any) -> None:
        """Judge the train questions (the ledger's pairs) and learn ``--method auto``."""
        from tttembed.score.ledger import Ledger, LedgerScorer
        from tttembed.ttt.scorer import load_scorer

        clock = Clock()
        # the qrels judge is free, so load_scorer keeps it out of the ledger: here it stands
        # for a paid judge, so every pair it answers is recorded, as a paid one would be
        scorer = LedgerScorer(load_scorer(self.scorer_spec, index=index, use_ledger=False),
                              Ledger(self.ledger))
        state = self.learn_states(index, scorer)
        train_s, core_s = clock.split()
        path = self.work / "states.npz"
        state.save(path, overwrite=True)
        self.pairs = dict(state.pairs)
        ndcg = self.measure("states", self.test_search(index, [state]))
        self.row("states", ndcg, train_s, 0.0, core_s, size(path),
                 choice=getattr(state, "selection", None) and _choice(state))

    def triplets(self) -> Any:
        from tttembed.tune.export import read_judged, read_triplets
        from tttembed.tune.pairs import triplets

        if self.args.triplets is not None:
            rows = read_triplets(self.args.triplets)
            self.triplet_info = {"source": str(self.args.triplets), "rows": len(rows)}
            return rows
        pairs = read_judged(str(self.ledger), self.args.data).pairs
        made = triplets(pairs)
        self.triplet_info = {"source": "ledger", "pairs": len(pairs), "rows": len(made.rows),
                             "threshold": made.threshold, "positives": made.positives,
                             "positives_without_negative": made.without_negative}
        return list(made.rows)

    def passages(self, index: Any) -> dict[str, Any]:
        """The index's vector of each document text (what the frozen model gave it)."""
        from tttembed.data.beir import doc_text, load_corpus

        corpus = load_corpus(self.args.data / "corpus.jsonl")
        row = {d: i for i, d in enumerate(index.doc_ids)}
        ids = [d for d in corpus if d in row]
        vecs = index.get_vectors([row[d] for d in ids])
        return {doc_text(corpus[d]): vecs[i] for i, d in enumerate(ids)}

    def query_lora(self, index: Any, rows: Any) -> None:
        from tttembed.ttt.queries import as_query_set
        from tttembed.ttt.search import adapted_search
        from tttembed.tune.train import fine_tune

        clock = Clock()
        tuned = fine_tune(rows, self.settings["query-lora"], passages=self.passages(index))
        train_s = clock.split()[0]
        qs = as_query_set(self.args.data, None, self.args.test_split, None, index)
        x = tuned.encode_queries(list(qs.texts))
        scores, found = adapted_search(index, qs, x, [], 100)
        _, core_s = clock.split()
        path = self.work / "query-lora"
        shutil.rmtree(path, ignore_errors=True)
        assert tuned.encoder is not None
        tuned.encoder.save(path)
        result = self.tt.SearchResult(qids=list(qs.qids), scores=scores, rows=found,
                                      doc_ids=index.doc_ids, tasks=list(qs.tasks),
                                      qrels=dict(qs.qrels))
        self.row("query-lora", self.measure("query-lora", result), train_s, 0.0, core_s,
                 size(path), final_loss=tuned.losses[-1], steps=len(tuned.losses))

    def full(self, rows: Any, with_states: bool) -> None:
        from tttembed.embed.cache import load_embedder
        from tttembed.tune.train import fine_tune

        clock = Clock()
        tuned = fine_tune(rows, self.settings["full-finetune"])
        train_s = clock.split()[0]
        model_dir = self.work / "full-model"
        shutil.rmtree(model_dir, ignore_errors=True)
        tuned.model.save(str(model_dir))
        emb = load_embedder(f"st:{model_dir.resolve()}", cache=False)
        t0 = time.perf_counter()
        index = self.tt.index_corpus(self.args.data, self.work / "full-index", embedder=emb,
                                     overwrite=True)
        reembed_s = time.perf_counter() - t0
        ndcg = self.measure("full-finetune", self.test_search(index, []))
        _, core_s = clock.split()
        nbytes = size(model_dir) + size(self.work / "full-index")
        self.row("full-finetune", ndcg, train_s, reembed_s, core_s, nbytes,
                 final_loss=tuned.losses[-1], steps=len(tuned.losses))
        if with_states:
            self.states_again(index, emb, train_s, reembed_s, core_s, nbytes)

    def states_again(self, index: Any, emb: Any, train_s: float, reembed_s: float,
                     core_s: float, nbytes: int) -> None:
        """States on the re-indexed corpus from the same ledger (a copy: nothing paid)."""
        from tttembed.score.ledger import Ledger, LedgerScorer
        from tttembed.ttt.scorer import load_scorer
        from tttembed.tune.paid import PaidOnly, ledger_copy

        copy = ledger_copy(self.ledger, self.work / "ledger-again.sqlite")
        inner = load_scorer(self.scorer_spec, index=index, use_ledger=False)
        scorer = LedgerScorer(PaidOnly(inner), Ledger(copy))
        clock = Clock()
        state = self.learn_states(index, scorer)
        s_train, s_core = clock.split()
        path = self.work / "states-again.npz"
        state.save(path, overwrite=True)
        ndcg = self.measure("full-finetune+states", self.test_search(index, [state]))
        self.row("full-finetune+states", ndcg, train_s + s_train, reembed_s, core_s + s_core,
                 nbytes + size(path), choice=_choice(state), unpaid=scorer.counts().missing)


def settings_from(path: Path | None) -> dict[str, Any]:
    """The fine-tunes' settings: the trainer's defaults, or the choice of a --select JSON."""
    from dataclasses import replace

    from tttembed.tune.train import FULL, QUERY_LORA

    out = {"query-lora": QUERY_LORA, "full-finetune": FULL}
    if path is not None:
        chosen = json.loads(path.read_text())["chosen"]
        for name, fields in chosen.items():
            out[name] = replace(out[name], **{k: v for k, v in fields.items()
                                             if k in ("lr", "epochs", "batch_size")})
    return out


#: the candidates --select tries (learning rate x epochs; the rest as the defaults)
GRID = {"query-lora": [(lr, e) for lr in (1e-4, 2e-4, 5e-4) for e in (1, 3)],
        "full-finetune": [(2e-5, 1), (2e-5, 3)]}


def validation_folder(args: argparse.Namespace, work: Path) -> Path:
    """The train questions split by text into fit (80%) and check (20%): a folder named as
    the data's (its task rules follow the name) whose qrels/train.tsv and qrels/test.tsv
    are both from --data's train split."""
    from split_by_text import split

    staging = work / "select-source"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "qrels").mkdir(parents=True)
    for name in ("queries.jsonl", "corpus.jsonl"):
        (staging / name).symlink_to((args.data / name).resolve())
    (staging / "qrels" / "train.tsv").symlink_to(
        (args.data / "qrels" / f"{args.train_split}.tsv").resolve())
    out = work / "select" / args.data.resolve().name
    shutil.rmtree(out, ignore_errors=True)
    counts = split(staging, out, 0.2, args.seed)
    if not counts["train"] or not counts["test"]:
        raise SystemExit(f"--select: the train split's {sum(counts.values())} questions give "
                         f"{counts['train']} to fit and {counts['test']} to check; it needs "
                         "both (more train questions, or another --seed)")
    print(f"selection on the train split only: {counts['train']} questions fit, "
          f"{counts['test']} check", flush=True)
    return out


def select(args: argparse.Namespace) -> int:
    """--select: every candidate of :data:`GRID` on the validation folder; the best
    nDCG@10 on its check questions is the choice."""
    from dataclasses import replace

    work = args.work or args.json.with_suffix(".work")
    work.mkdir(parents=True, exist_ok=True)
    val = argparse.Namespace(**{**vars(args), "data": validation_folder(args, work),
                                "train_split": "train", "test_split": "test",
                                "work": work / "select-run", "json": work / "select.json",
                                "hyperparameters": None})
    bench = Bench(val)
    index = bench.raw_index()
    bench.measure("raw", bench.test_search(index))
    bench.states(index)
    rows = bench.triplets()
    table: dict[str, list[dict[str, Any]]] = {}
    for name, grid in GRID.items():
        if name not in args.methods:
            continue
        for lr, epochs in grid:
            bench.settings[name] = replace(settings_from(None)[name], lr=lr, epochs=epochs)
            (bench.query_lora(index, rows) if name == "query-lora"
             else bench.full(rows, with_states=False))
            got = bench.rows[name]
            table.setdefault(name, []).append({"lr": lr, "epochs": epochs,
                                               "ndcg10": got["ndcg10"], "delta": got["delta"],
                                               "core_s": got["core_s"]})
    chosen = {name: {k: max(rows_, key=lambda r: r["ndcg10"])[k] for k in ("lr", "epochs")}
              for name, rows_ in table.items()}
    write_json(args.json, {"data": str(args.data), "validation": str(val.data),
                           "raw": {"ndcg10": sum(bench.per_query["raw"].values())
                                   / max(1, len(bench.per_query["raw"]))},
                           "states": bench.rows["states"], "table": table, "chosen": chosen,
                           "triplets": bench.triplet_info})
    print(f"chosen on the train split: {chosen}; wrote {args.json}")
    return 0


def _choice(state: Any) -> Any:
    sel = getattr(state, "selection", None) or {}
    return sel.get("choice", sel) if isinstance(sel, dict) else str(sel)


def results(args: argparse.Namespace, bench: Bench, raw: float) -> dict[str, Any]:
    """The JSON of the rows measured so far."""
    return {"data": str(args.data), "budget": args.budget, "seed": args.seed,
            "pairs": bench.pairs.get("paid", 0) + bench.pairs.get("cached", 0),
            "pair_counts": bench.pairs, "triplets": getattr(bench, "triplet_info", None),
            "raw": {"ndcg10": raw, "n": len(bench.per_query["raw"])},
            "methods": {m: bench.rows[m] for m in args.methods if m in bench.rows},
            "hyperparameters": {"states": {"method": "auto", "budget": args.budget,
                                           "alpha": "rule", "seed": args.seed},
                                **{k: v.record() for k, v in bench.settings.items()},
                                "chosen": str(args.hyperparameters) if args.hyperparameters
                                else "the defaults: sentence-transformers' (full) and the "
                                     "chain adapter's (LoRA)"},
            "runs": bench.runs}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.select:
        return select(args)
    bench = Bench(args)
    index = bench.raw_index()
    bench.measure("raw", bench.test_search(index))
    raw = sum(bench.per_query["raw"].values()) / max(1, len(bench.per_query["raw"]))
    print(f"{'raw':>22}: nDCG@10 {raw:.4f} on {len(bench.per_query['raw'])} test questions",
          flush=True)
    bench.states(index)  # always: its learn pays the pairs every row learns from
    save = lambda: write_json(args.json, results(args, bench, raw))  # noqa: E731
    save()  # after every row: a run killed later keeps the rows it measured
    rows = bench.triplets() if set(args.methods) - {"states"} else []
    if "query-lora" in args.methods:
        bench.query_lora(index, rows)
        save()
    if {"full-finetune", "full-finetune+states"} & set(args.methods):
        bench.full(rows, "full-finetune+states" in args.methods)
    save()
    print(f"wrote {args.json}")
    tuned = {m: r for m, r in bench.rows.items() if m != "states" and m != "full-finetune+states"}
    if "states" in bench.rows and tuned:
        best = max(tuned.values(), key=lambda r: r["delta"])
        s = bench.rows["states"]
        share = s["delta"] / best["delta"] if best["delta"] > 0 else None
        claims.emit(GOALS, {"share": share, "cost": s["core_s"] / max(best["core_s"], 1e-9)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
