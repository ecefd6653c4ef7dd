"""How a task-wise vector's gain for questions nobody asked grows with the number of
questions it is learned from, on a BEIR folder's TRAIN split only (no test label read).

The live loop learns its shared part from its window (``tttembed.loop.window.WINDOW``
rewarded texts, the most recently changed). This measures what a shared part learned
from that many questions gives questions it never saw, against one learned from more:
the train questions are shuffled (seed 99), ``--held`` of them are held out and never
judged, and for each size in ``--sizes`` a task-wise state is learned (``tt.learn``,
``scope="task"``, the ``qrels`` judge on the train labels, b = 10 pairs a question, the
write-up's defaults) from that many of the others (``--seeds`` random draws), then the
held-out questions are searched raw and adapted: mean Delta nDCG@10 with its paired test.

    python benchmarks/shared_part_size.py ../shared/data/scifact --index INDEX
    python benchmarks/shared_part_size.py ../shared/data/scifact --sizes 100,250,all \\
        --seeds 3 --json out.json

Goal (stated before the run; it decides nothing in the product): none. It reports how
far a shared part learned from the window's size is from one learned from all.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TTTEMBED_THREADS", "1")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path, help="a BEIR folder with qrels/train.tsv")
    p.add_argument("--index", type=Path, default=None,
                   help="the folder's index (default: built into a temporary folder)")
    p.add_argument("--sizes", default="100,250,all",
                   help="questions a state is learned from, comma-separated ('all': every "
                        "train question not held out)")
    p.add_argument("--held", type=int, default=300,
                   help="train questions held out (never judged), where the gain is measured")
    p.add_argument("--seeds", type=int, default=3, help="random draws per size")
    p.add_argument("--json", type=Path, default=None, help="the rows, as JSON")
    args = p.parse_args(argv)
    if not (args.data / "qrels" / "train.tsv").exists():
        p.error(f"{args.data / 'qrels' / 'train.tsv'} does not exist: give a BEIR folder "
                "with a train split")
    return args


def train_split(data: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The train questions' texts and judgments (the judged questions that have a text)."""
    from tttembed.data.beir import load_beir_queries, load_qrels

    text = load_beir_queries(data / "queries.jsonl")
    qrels = load_qrels(data / "qrels" / "train.tsv")
    return text, {q: j for q, j in qrels.items() if q in text}


def measure(args: argparse.Namespace, index: Any) -> list[dict[str, Any]]:
    import tttembed as tt

    text, qrels = train_split(args.data)
    ids = sorted(qrels)
    random.Random(99).shuffle(ids)
    held, pool = ids[:args.held], ids[args.held:]
    if not held or not pool:
        raise SystemExit(f"{len(ids)} train questions: too few to hold {args.held} out")
    judged = {q: qrels[q] for q in held}  # a metric counts every question of its qrels
    task = args.data.name

    def ndcg(states: list[Any]) -> dict[str, float]:
        res = tt.search(index, {q: text[q] for q in held}, task=task, k=10, states=states)
        return tt.per_query_metric(judged, res.to_run())

    raw = ndcg([])
    print(f"{task}: {len(ids)} train questions, {len(held)} held out, raw nDCG@10 "
          f"{sum(raw.values()) / len(raw):.4f}", flush=True)
    print("| learned from | seed | held-out nDCG@10 | Delta | 95% interval | p |")
    print("|---:|---:|---:|---:|---|---:|")
    rows = []
    for size in args.sizes.split(","):
        n = len(pool) if size == "all" else min(int(size), len(pool))
        for seed in range(1 if n == len(pool) else args.seeds):
            pick = pool if n == len(pool) else random.Random(seed).sample(pool, n)
            state = tt.learn(index, {q: text[q] for q in pick}, task=task, scope="task",
                             scorer=f"qrels:{args.data / 'qrels' / 'train.tsv'}",
                             budget=10, corpus=args.data, seed=seed)
            c = tt.compare(ndcg([state]), raw)
            row = {"learned_from": n, "seed": seed, "held_out": len(held),
                   "ndcg10": round(c.mean_a, 4), "raw": round(c.mean_b, 4),
                   "delta": round(c.delta, 4), "ci": [round(c.ci_low, 4), round(c.ci_high, 4)],
                   "p": round(c.p_value, 4)}
            rows.append(row)
            print(f"| {n} | {seed} | {c.mean_a:.4f} | {c.delta:+.4f} | "
                  f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}] | {c.p_value:.3f} |", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import tttembed as tt

    with tempfile.TemporaryDirectory() as tmp:
        index = tt.open_index(args.index) if args.index else \
            tt.index_corpus(args.data, Path(tmp) / "index")
        rows = measure(args, index)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
