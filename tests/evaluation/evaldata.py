"""Tiny BEIR folders written by the eval tests (deterministic, a few dozen texts)."""

from __future__ import annotations

import json
from pathlib import Path

TOPICS = {
    "astro": ["galaxy", "telescope", "orbit", "planet", "nebula", "comet"],
    "cook": ["recipe", "oven", "flour", "garlic", "simmer", "pastry"],
    "law": ["court", "judge", "contract", "appeal", "statute", "verdict"],
    "bio": ["protein", "enzyme", "cell", "gene", "membrane", "mutation"],
    "sea": ["ocean", "tide", "coral", "reef", "whale", "current"],
    "rail": ["train", "station", "track", "locomotive", "carriage", "signal"],
}


def write_task(root: Path, name: str, topics: list[str], docs_per_topic: int = 6,
               queries_per_topic: int = 3, train: bool = False) -> Path:
    """A BEIR folder: docs and queries per topic; a query's own topic docs are relevant
    (grade 2 for the first two, 1 for the next two)."""
    path = root / name
    (path / "qrels").mkdir(parents=True, exist_ok=True)
    docs, queries, qrels, train_qrels = [], [], [], []
    for topic in topics:
        words = TOPICS[topic]
        for j in range(docs_per_topic):
            text = " ".join(words[(j + i) % len(words)] for i in range(4))
            docs.append({"_id": f"{name}-{topic}-d{j}", "title": f"{topic} note {j}",
                         "text": f"A {topic} passage about {text}."})
        n_q = queries_per_topic + (2 if train else 0)
        for j in range(n_q):
            qid = f"{topic}-q{j}"
            queries.append({"_id": qid, "text": f"what about {words[j % 6]} and {words[(j + 2) % 6]}"})
            target = train_qrels if train and j >= queries_per_topic else qrels
            for d in range(4):
                target.append((qid, f"{name}-{topic}-d{(j + d) % docs_per_topic}", 2 if d < 2 else 1))
    with (path / "corpus.jsonl").open("w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with (path / "queries.jsonl").open("w") as f:
        for q in queries:
            f.write(json.dumps(q) + "\n")
    for split, rows in (("test", qrels), ("train", train_qrels)):
        if rows:
            with (path / "qrels" / f"{split}.tsv").open("w") as f:
                f.write("query-id\tcorpus-id\tscore\n")
                for q, d, g in rows:
                    f.write(f"{q}\t{d}\t{g}\n")
    return path


def write_tasks(root: Path) -> Path:
    """Two tasks under ``root``: ``alpha`` (3 topics, with a train split) and ``beta``."""
    write_task(root, "alpha", ["astro", "cook", "law"], train=True)
    write_task(root, "beta", ["bio", "sea", "rail"])
    return root
