"""A million-vector index on one machine: FAISS flat / IVF-Flat / IVF-PQ / HNSW and
Milvus Lite, built from 1,000,000 synthetic unit vectors (d = 384) with the real SciFact
documents mixed in, so that nDCG@10 on the SciFact test queries is real.

    python benchmarks/bench_scale_index.py [--n 1000000] [--backends ivfpq,ivf,hnsw,flat,milvus]
        [--size hnsw=200000 --size milvus=20000] [--learn-queries 10000]
        [--exact-learn-queries 300] [--train-queries 300] [--repeats 3]

The run recorded in docs/scaling.md ("Million-vector index"), on 2 shared cores:
``--n 1000000 --backends flat,ivfpq,hnsw,milvus,ivf --size hnsw=200000 --size
milvus=20000 --exact-learn-queries 300 --train-queries 300 --repeats 1`` (21 minutes).
Index parameters: ``PARAMS`` below (IVF nlist 256 so that k-means trains in a minute).

Data. The SciFact corpus is embedded with the bundled MiniLM through the embedding cache
(``--cache-dir``, default ``/tmp/study/cache`` when it exists: cache hits). Synthetic
document ``i`` is a *perturbed real document*: ``unit(d_j + s g)`` with ``j`` a random
SciFact document, ``g ~ N(0, I/d)`` (norm ~ 1) and ``s = --noise`` (1.0: cosine ~ 0.71 to
its source). Random unit vectors would be trivially separable: in d = 384 their cosine
with any query is 0 +- 0.05, far below the 0.3-0.7 of real documents, so they would never
reach a top 10 (nDCG identical to the 5k-document index) and IVF would cluster isotropic
noise. Perturbed documents live where real documents live (MiniLM's space is anisotropic),
compete for every top 10 and make the clustering realistic. Rows: the 5,183 real
documents first, then the synthetic ones (a smaller run uses a prefix of the same file).

Per backend, two subprocesses run one after the other (one backend at a time; the peak
RSS of each is sampled over its whole process tree, Milvus Lite's server included, and
read from ``getrusage``): **build** (write the index from the vectors) and **serve**
(open it; learn a task state from the SciFact *train* queries with ``qrels`` rewards on
train (K = 10 per query; leak-free: test judgments are only used to evaluate); raw and
adapted search of the 300 test queries, same query vectors, same index, alternating
repeats, medians; nDCG@10 raw and adapted; ``learn`` at K = 10 over ``--learn-queries``
synthetic queries (SciFact titles and first sentences, encoded through the cache) with a
zero-cost hash scorer, so that the time is the index's and the optimiser's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from _support import DATA, proc_status
from claims import Goal, emit

GIB = 1 << 30
GOALS = {
    "ratio": Goal("million-vector index: adapted / raw search latency, worst FAISS backend",
                  "<=", 1.05),
    "step": Goal("million-vector index: (raw search + adaptation step) / raw search, worst "
                 "backend", "<=", 1.05),
    "flat_rss": Goal("million-vector index: peak RSS, FAISS flat (build or serve)", "<=", 24,
                     " GiB"),
    "pq_rss": Goal("million-vector index: peak RSS serving + learning, IVF-PQ", "<=", 4,
                   " GiB"),
    "learn_s": Goal("million-vector index: learn K=10, 10,000 queries, FAISS flat (measured, "
                    "or extrapolated linearly from --exact-learn-queries)", "info", None, " s"),
}
# Index parameters used at every size here (see docs/scaling.md for the per-size advice).
PARAMS: dict[str, tuple[str, dict[str, int]]] = {
    "flat": ("flat", {}),
    "ivf": ("ivf", {"nlist": 256, "nprobe": 16}),
    "ivfpq": ("ivfpq", {"nlist": 256, "nprobe": 16, "pq_m": 48}),
    "hnsw": ("hnsw", {"m": 16, "ef_construction": 40, "ef_search": 64}),
    "milvus": ("flat", {}),
}


class HashScorer:
    """A zero-cost scorer: a deterministic pseudo-random reward per (query, doc) pair."""

    spec = identity = "bench-hash"
    mapping = "crc32/1000"

    def score(self, query: Any, docs: Any) -> np.ndarray:
        return np.array([zlib.crc32(f"{query.id}|{d.id}".encode()) % 1000 / 999.0
                         for d in docs], dtype=np.float64)


# ---------------------------------------------------------------- data (main process)

def embedder(args: argparse.Namespace) -> Any:
    from tttembed import api

    return api.load_embedder(cache_dir=args.cache_dir)


def learn_texts(corpus: dict[str, dict[str, str]], n: int) -> dict[str, str]:
    """``n`` query-like texts: SciFact titles, then first sentences of abstracts."""
    titles = [d.get("title", "") for d in corpus.values()]
    firsts = [d["text"].split(". ")[0][:300] for d in corpus.values()]
    texts = [t for t in titles + firsts if t.strip()][:n]
    return {f"s{i}": t for i, t in enumerate(texts)}


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Write vectors.npy (real docs first, then ``n`` perturbed ones) and warm the cache
    with every query text the workers encode."""
    from tttembed.data.beir import doc_text, load_task
    from tttembed.index.search import encode_queries

    args.work.mkdir(parents=True, exist_ok=True)
    task = load_task(args.data, split="test")
    train = load_task(args.data, split="train")
    emb = embedder(args)
    ids = list(task.corpus)
    t0 = time.perf_counter()
    real = emb.encode([doc_text(task.corpus[d]) for d in ids], "document")
    embed_s = time.perf_counter() - t0
    total = len(ids) + args.n
    out = np.lib.format.open_memmap(args.work / "vectors.npy", "w+", np.float32,
                                    (total, real.shape[1]))
    out[:len(ids)] = real
    rng = np.random.default_rng(0)
    for start in range(0, args.n, 100_000):
        m = min(100_000, args.n - start)
        g = rng.standard_normal((m, real.shape[1])).astype(np.float32)
        v = real[rng.integers(0, len(ids), m)] + args.noise * g / np.sqrt(real.shape[1])
        out[len(ids) + start:len(ids) + start + m] = v / np.linalg.norm(v, axis=1,
                                                                        keepdims=True)
    out.flush()
    del out
    for texts in (task.queries, train.queries, learn_texts(task.corpus, args.learn_queries)):
        encode_queries(emb, list(texts.values()))
    return {"n_real": len(ids), "embed_s": embed_s, "encode_s": time.perf_counter() - t0}


# ---------------------------------------------------------------- workers (subprocesses)

def worker_data(args: argparse.Namespace, n: int) -> tuple[Any, list[str], dict, Any]:
    """(vectors prefix, doc ids, corpus, the SciFact test task) of a run with ``n``
    synthetic documents."""
    from tttembed.data.beir import load_task

    task = load_task(args.data, split="test")
    vectors = np.load(args.work / "vectors.npy", mmap_mode="r")[:len(task.corpus) + n]
    empty = {"title": "", "text": ""}
    corpus = {**{k: dict(v) for k, v in task.corpus.items()},
              **{f"syn-{i}": empty for i in range(n)}}
    return vectors, list(corpus), corpus, task


def target(args: argparse.Namespace, backend: str) -> str:
    if backend == "milvus":
        return f"milvus:{args.work / 'milvus.db'}/scale"
    return str(args.work / f"index-{backend}")


def do_build(args: argparse.Namespace, backend: str, n: int) -> dict[str, Any]:
    from tttembed.data.beir import corpus_fingerprint
    from tttembed.index.store import write_index

    vectors, doc_ids, corpus, _ = worker_data(args, n)
    emb = embedder(args)
    kind, params = PARAMS[backend]
    t0 = time.perf_counter()
    write_index(target(args, backend), doc_ids, vectors, embedder_identity=emb.identity,
                embedder_spec=emb.spec, corpus_fingerprint=corpus_fingerprint(corpus),
                index_type=kind, index_params=params, overwrite=True)
    return {"build_s": time.perf_counter() - t0}


def timed_searches(index: Any, qs: Any, x: np.ndarray, state: Any, k: int,
                   repeats: int) -> dict[str, Any]:
    """Raw and adapted searches of the same query vectors, in alternating order (raw
    first on even repeats, adapted first on odd ones): medians, and the last result of
    each; plus the adaptation step alone (``unit(x + alpha v)``), median of 5."""
    from tttembed.ttt import adapted_search
    from tttembed.ttt.search import adapt_queries

    times: dict[str, list[float]] = {"raw": [], "adapted": []}
    got: dict[str, Any] = {}
    run = {"raw": lambda: index.search(x, k),
           "adapted": lambda: adapted_search(index, qs, x, [state], k)}
    for i in range(repeats):
        for name in (("raw", "adapted") if i % 2 == 0 else ("adapted", "raw")):
            t0 = time.perf_counter()
            got[name] = run[name]()
            times[name].append(time.perf_counter() - t0)
    step = []
    for _ in range(5):
        t0 = time.perf_counter()
        adapt_queries(x, qs, [state])
        step.append(time.perf_counter() - t0)
    return {"raw_s": statistics.median(times["raw"]),
            "adapted_s": statistics.median(times["adapted"]),
            "step_s": statistics.median(step), "raw": got["raw"], "adapted": got["adapted"]}


def ndcg(index: Any, qs: Any, result: tuple[np.ndarray, np.ndarray], qrels: dict) -> float:
    from tttembed import api
    from tttembed.ttt.queries import run_from_arrays

    scores, rows = result
    run = run_from_arrays(qs, index, rows, scores)["scifact"]
    return float(api.run_metrics(qrels, run, ("ndcg@10",))["ndcg@10"])


def do_serve(args: argparse.Namespace, backend: str, n: int) -> dict[str, Any]:
    from tttembed import api
    from tttembed.data.beir import load_task
    from tttembed.index.search import encode_queries
    from tttembed.index.store import load_index
    from tttembed.ttt import LearnOptions
    from tttembed.ttt import learn_outcome as run_learn
    from tttembed.ttt.queries import QuerySet

    _, _, corpus, task = worker_data(args, n)
    emb = embedder(args)
    t0 = time.perf_counter()
    index = load_index(target(args, backend), expected_identity=emb.identity)
    out: dict[str, Any] = {"open_s": time.perf_counter() - t0, "hwm_open_gib": hwm_gib()}
    train = load_task(args.data, split="train")
    scorer = api.load_scorer(f"qrels:{args.data}", split="train", use_ledger=False)
    train_qs = QuerySet.from_tasks({"scifact": train.queries})
    if args.train_queries:
        train_qs = train_qs.subset(range(min(args.train_queries, len(train_qs))))
    t0 = time.perf_counter()
    state = run_learn(index, emb, train_qs, corpus, scorer,
                      LearnOptions(scope="task", budget=10)).state
    out.update(train_queries=len(train_qs), hwm_train_gib=hwm_gib())
    out["learn_train_s"] = time.perf_counter() - t0
    qs = QuerySet.from_tasks({"scifact": task.queries})
    x = encode_queries(emb, list(qs.texts))
    got = timed_searches(index, qs, x, state, 100, args.repeats)
    out.update(raw_ms=got["raw_s"] * 1e3, adapted_ms=got["adapted_s"] * 1e3,
               ratio=got["adapted_s"] / got["raw_s"], step_ms=got["step_s"] * 1e3,
               step_ratio=(got["raw_s"] + got["step_s"]) / got["raw_s"],
               ndcg_raw=ndcg(index, qs, got["raw"], task.qrels),
               ndcg_adapted=ndcg(index, qs, got["adapted"], task.qrels))
    out["hwm_search_gib"] = hwm_gib()
    if args.learn_queries:
        texts = learn_texts({k: corpus[k] for k in task.corpus}, args.learn_queries)
        t0 = time.perf_counter()
        learned = run_learn(index, emb, QuerySet.from_tasks({"synthetic": texts}), corpus,
                            HashScorer(), LearnOptions(scope="task", budget=10))
        out.update(learn_s=time.perf_counter() - t0, learn_pairs=learned.counts["requested"],
                   learn_queries=len(texts))
    return out


def hwm_gib() -> float:
    """This process's peak RSS so far, VmHWM (``ru_maxrss`` would carry over the parent's
    peak at fork)."""
    return proc_status("VmHWM") / (1 << 20)


def worker(args: argparse.Namespace) -> int:
    phase, backend, n = args.worker.split(":")
    t0 = hwm_gib()
    result = (do_build if phase == "build" else do_serve)(args, backend, int(n))
    ch = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20)
    result.update(hwm_start_gib=t0, hwm_gib=hwm_gib(), children_maxrss_gib=ch)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- main process

def sample_tree(pid: int, peak: list[float], stop: threading.Event) -> None:
    """Peak RSS (GiB) of ``pid`` and its descendants, sampled every 0.2 s."""
    import psutil

    try:
        proc = psutil.Process(pid)
        while not stop.is_set():
            rss = 0
            for p in [proc, *proc.children(recursive=True)]:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], rss / GIB)
            stop.wait(0.2)
    except psutil.Error:
        return


def run_worker(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", spec, "--work", str(args.work),
           "--data", str(args.data), "--cache-dir", str(args.cache_dir),
           "--learn-queries", str(learn_queries(args, spec.split(":")[1])),
           "--repeats", str(args.repeats), "--train-queries", str(args.train_queries)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak, stop = [0.0], threading.Event()
    thread = threading.Thread(target=sample_tree, args=(proc.pid, peak, stop), daemon=True)
    thread.start()
    stdout, _ = proc.communicate()
    stop.set()
    thread.join()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"worker {spec} failed (exit {proc.returncode})")
    result = json.loads(lines[-1][7:])
    result.update(tree_peak_gib=peak[0], wall_s=time.perf_counter() - t0)
    print(f"  {spec}: {json.dumps({k: round(v, 4) for k, v in result.items()})}", flush=True)
    return result


def learn_queries(args: argparse.Namespace, backend: str) -> int:
    exact = backend in ("flat", "milvus") and args.exact_learn_queries is not None
    return int(args.exact_learn_queries if exact else args.learn_queries)


def cleanup(args: argparse.Namespace, backend: str) -> None:
    path = args.work / ("milvus.db" if backend == "milvus" else f"index-{backend}")
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def peak(r: dict[str, Any]) -> float:
    """Peak RSS (GiB) of a worker: its own high-water mark or its sampled process tree
    (Milvus Lite's server included), whichever is larger."""
    return max(float(r["tree_peak_gib"]), float(r.get("hwm_gib", 0.0)))


def table(rows: dict[str, dict[str, Any]], sizes: dict[str, int], n_real: int) -> None:
    head = ("backend", "docs", "build s", "build peak GiB", "serve peak GiB", "raw ms",
            "adapted ms", "ratio", "step ms", "nDCG@10 raw", "nDCG@10 adapted", "learn queries", "learn s", "learn q/s")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, r in rows.items():
        b, s = r["build"], r["serve"]
        learn = s.get("learn_s")
        cells = (f"{name} {PARAMS[name][1] or ''}".strip(), f"{n_real + sizes[name]:,}",
                 f"{b['build_s']:.0f}", f"{peak(b):.2f}", f"{peak(s):.2f}", f"{s['raw_ms']:.0f}", f"{s['adapted_ms']:.0f}",
                 f"{s['ratio']:.3f}", f"{s['step_ms']:.2f}", f"{s['ndcg_raw']:.4f}", f"{s['ndcg_adapted']:.4f}",
                 f"{s.get('learn_queries', 0):,}", "-" if learn is None else f"{learn:.0f}",
                 "-" if learn is None else f"{s['learn_queries'] / learn:.0f}")
        print("| " + " | ".join(cells) + " |")


def per_10k(serve: dict[str, Any]) -> float | None:
    """Seconds of ``learn`` for 10,000 queries (scaled linearly when fewer were run)."""
    if not serve.get("learn_s"):
        return None
    return float(serve["learn_s"]) * 10_000 / int(serve["learn_queries"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic documents")
    ap.add_argument("--size", action="append", default=[], metavar="BACKEND=N",
                    help="synthetic documents for one backend (default --n), e.g. milvus=50000")
    ap.add_argument("--exact-learn-queries", type=int, default=None,
                    help="learn queries for the exact backends (flat, milvus; default "
                         "--learn-queries): their search is linear in the queries")
    ap.add_argument("--backends", default="ivfpq,ivf,hnsw,flat,milvus")
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--learn-queries", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-queries", type=int, default=0,
                    help="learn the SciFact state from the first N train queries (0: all 809)")
    ap.add_argument("--data", type=Path, default=DATA / "scifact")
    study = Path("/tmp/study/cache")
    ap.add_argument("--cache-dir", type=Path, default=study if study.exists() else None)
    ap.add_argument("--work", type=Path, default=Path("/tmp/tttembed-scale-index"))
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cache_dir is not None and str(args.cache_dir) == "None":
        args.cache_dir = None
    if args.worker:
        return worker(args)
    return run_all(args)


def run_all(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    prep = prepare(args)
    print(f"data: {prep['n_real']:,} SciFact docs + {args.n:,} perturbed (noise "
          f"{args.noise}); corpus embedded in {prep['embed_s']:.1f} s (cache "
          f"{args.cache_dir}); {os.cpu_count()} CPUs", flush=True)
    backends = [b for b in args.backends.split(",") if b]
    asked = {k: int(v) for k, v in (item.split("=") for item in args.size)}
    sizes = {b: min(asked.get(b, args.n), args.n) for b in backends}
    rows: dict[str, dict[str, Any]] = {}
    for b in backends:
        rows[b] = {"build": run_worker(args, f"build:{b}:{sizes[b]}"),
                   "serve": run_worker(args, f"serve:{b}:{sizes[b]}")}
        cleanup(args, b)
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    print(f"\nlearn at K = 10 (learn q/s: queries per second of the whole learn call); "
          f"search: 300 SciFact test "
          f"queries, top 100, median of {args.repeats}; total {time.perf_counter() - t0:.0f} s")
    table(rows, sizes, prep["n_real"])
    faiss = [b for b in rows if b != "milvus"]
    peaks = {b: max(peak(rows[b]["build"]), peak(rows[b]["serve"])) for b in rows}
    emit(GOALS, {"ratio": max((rows[b]["serve"]["ratio"] for b in faiss), default=None),
                 "step": max(rows[b]["serve"]["step_ratio"] for b in rows),
                 "flat_rss": peaks.get("flat"),
                 "pq_rss": peak(rows["ivfpq"]["serve"]) if "ivfpq" in rows else None,
                 "learn_s": per_10k(rows.get("flat", {}).get("serve", {}))},
         note=f"{args.n:,} synthetic + SciFact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
