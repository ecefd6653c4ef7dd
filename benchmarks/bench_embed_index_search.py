"""Foundation benchmarks, ratios measured in one run.

1. Corpus embedding through tttembed's pipeline (CachedEmbedder, fresh cache: hashing,
   chunking, shard writes) against bare ``SentenceTransformer.encode`` on the same texts.
   Goal: pipeline throughput >= 0.9x bare. Runs alternate (bare, pipeline, bare, ...) and
   the median of each is compared, since this machine is noisy.
2. Re-index with a warm cache: model calls counted (goal: 0).
3. Raw search of the SciFact test queries: time split into encoding and searching.

    python benchmarks/bench_embed_index_search.py [--docs 1500] [--repeats 3]

Uses ../shared/data/scifact when present, else the stdlib docstring demo corpus.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from _support import DATA
from claims import Goal, emit

GOALS = {
    "throughput": Goal("embedding: pipeline / bare encode throughput", ">=", 0.9, "x"),
    "warm_calls": Goal("embedding: model calls when re-indexing with a warm cache", "==", 0),
}
SCIFACT = DATA / "scifact"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1500, help="documents per embedding run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=SCIFACT)
    ap.add_argument("--parts", default="1,2,3", help="which measurements to run")
    args = ap.parse_args()

    from tttembed import api
    from tttembed.data.beir import doc_text, load_task
    from tttembed.embed import get_embedder
    from tttembed.embed.cache import CachedEmbedder

    if (args.data / "corpus.jsonl").exists():
        task = load_task(args.data, split="test")
        corpus, queries, source = task.corpus, task.queries, str(args.data)
    else:
        from tttembed.demo.corpus import demo_task

        t = demo_task()
        corpus, queries, source = t.corpus, t.queries, "stdlib docstrings (demo)"
    texts = [doc_text(d) for d in list(corpus.values())[: args.docs]]
    print(f"data: {source}; {len(texts)} documents per embedding run, {args.repeats} repeats")

    parts = set(args.parts.split(","))
    inner = get_embedder()
    model = inner.model
    model.encode(texts[:64], batch_size=inner.batch_size)  # warm-up
    bare_t, pipe_t = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats if "1" in parts else 0):
            t0 = time.perf_counter()
            model.encode(texts, batch_size=inner.batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)
            bare_t.append(time.perf_counter() - t0)
            emb = CachedEmbedder(inner, Path(tmp) / f"cold{r}")  # fresh cache: all texts new
            t0 = time.perf_counter()
            emb.encode(texts, "document")
            pipe_t.append(time.perf_counter() - t0)
        if "1" in parts:
            report_throughput(texts, bare_t, pipe_t)
        if "2" in parts:
            warm_reindex(api, corpus, inner, Path(tmp), args.docs)
        if "3" in parts:
            raw_search(api, corpus, queries, inner, locals().get("task"))
    return 0


def report_throughput(texts, bare_t, pipe_t) -> None:
    bare, pipe = statistics.median(bare_t), statistics.median(pipe_t)
    ratio = bare / pipe
    print("\n[1] corpus embedding throughput (docs/s, median of repeats)")
    print(f"    bare SentenceTransformer.encode : {len(texts) / bare:8.1f}  ({bare:.2f} s)")
    print(f"    tttembed pipeline (cold cache)  : {len(texts) / pipe:8.1f}  ({pipe:.2f} s)")
    print(f"    pipeline / bare throughput      : {ratio:.3f}x  (goal >= 0.9x) "
          f"{'OK' if ratio >= 0.9 else 'BELOW GOAL'}")
    emit(GOALS, {"throughput": ratio})



def warm_reindex(api, corpus, inner, tmp, n_docs) -> None:
    from tttembed.embed.cache import CachedEmbedder

    # [2] index the corpus, then re-index with the warm cache
    sub = dict(list(corpus.items())[:n_docs])
    emb = CachedEmbedder(inner, Path(tmp) / "warm")
    t0 = time.perf_counter()
    api.index_corpus(sub, Path(tmp) / "idx1", embedder=emb)
    cold_s, cold_calls = time.perf_counter() - t0, emb.model_calls
    emb2 = CachedEmbedder(inner, Path(tmp) / "warm")
    t0 = time.perf_counter()
    api.index_corpus(sub, Path(tmp) / "idx2", embedder=emb2)
    warm_s = time.perf_counter() - t0
    print("\n[2] re-index with a warm cache")
    print(f"    cold index: {cold_s:.2f} s, model calls {cold_calls}")
    print(f"    warm index: {warm_s:.2f} s, model calls {emb2.model_calls} (goal 0), "
          f"texts embedded {emb2.texts_embedded}; speed-up {cold_s / warm_s:.1f}x")
    emit(GOALS, {"warm_calls": emb2.model_calls})



def raw_search(api, corpus, queries, inner, task) -> None:
    # [3] raw search of the test queries over the full corpus. The index is built once
    # (and reused from the user cache); queries go to the bare model, uncached, so the
    # encoding time is real model time.
    from tttembed.core.paths import cache_dir
    from tttembed.embed.cache import CachedEmbedder

    idx_dir = cache_dir() / "bench" / f"full-{len(corpus)}"
    emb3 = CachedEmbedder(inner)
    if not (idx_dir / "CURRENT").exists():
        api.index_corpus(corpus, idx_dir, embedder=emb3, overwrite=True)
    index = api.open_index(idx_dir, embedder=emb3)
    res = api.search(index, queries, embedder=inner, k=100)
    enc, srch = res.timings["encode_s"], res.timings["search_s"]
    print(f"\n[3] raw search of {len(queries)} queries over {len(corpus)} docs, top 100")
    print(f"    encode {enc:.3f} s ({enc / (enc + srch):.1%}), search {srch:.4f} s "
          f"({srch / (enc + srch):.1%}); {len(queries) / (enc + srch):.0f} queries/s")
    if task_qrels := getattr(task, "qrels", None):
        from tttembed.metrics.ranking import run_metrics

        print(f"    nDCG@10 = {run_metrics(task_qrels, res.to_run(), ('ndcg@10',))['ndcg@10']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
