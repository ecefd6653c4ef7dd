"""Split a BEIR folder's judged questions into train and test by their text.

    python benchmarks/split_by_text.py ../shared/data/arguana /tmp/arguana_split
        [--test-share 0.3] [--seed 0]

Questions are grouped by their normalised text (:func:`tttembed.adapt.scopes.query_digest`:
what a query-wise state is keyed by), so no test question shares a text with a train
question (ArguAna's questions are arguments, some of them asked under several ids). A
group goes to test when the sha256 of ``seed`` and its digest falls under
``--test-share``: deterministic, independent of file order. Every split's judgments of
the source are pooled first (ArguAna has test judgments only). The output folder holds
``queries.jsonl`` (the judged questions), ``qrels/train.tsv``, ``qrels/test.tsv`` and
``corpus.jsonl`` (a symbolic link to the source's: the corpus is read, never copied).
``benchmarks/bench_soak.py --data OUT`` then streams the train questions and replays
the test ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _support import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

from tttembed.adapt.scopes import query_digest  # noqa: E402


def _qrels(folder: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for path in sorted((folder / "qrels").glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            if line.strip():
                qid, did, grade = line.split("\t")[:3]
                out.setdefault(qid, {})[did] = grade
    return out


def split(source: Path, out: Path, test_share: float = 0.3, seed: int = 0) -> dict[str, int]:
    """Write the split folder ``out`` (module docstring); the questions per split."""
    qrels = _qrels(source)
    texts = {}
    for line in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row["_id"] in qrels:
                texts[row["_id"]] = row["text"]
    side = {}
    for qid, text in texts.items():
        h = hashlib.sha256(f"{seed}\0{query_digest(text)}".encode()).digest()
        side[qid] = "test" if int.from_bytes(h[:8], "big") / 2**64 < test_share else "train"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
        for q, t in texts.items()), encoding="utf-8")
    for name in ("train", "test"):
        rows = [f"{q}\t{d}\t{g}" for q in texts if side[q] == name
                for d, g in qrels[q].items()]
        (out / "qrels" / f"{name}.tsv").write_text(
            "\n".join(["query-id\tcorpus-id\tscore", *rows]) + "\n", encoding="utf-8")
    corpus = out / "corpus.jsonl"
    if corpus.is_symlink() or corpus.exists():
        corpus.unlink()
    corpus.symlink_to((source / "corpus.jsonl").resolve())
    return {name: sum(1 for q in texts if side[q] == name) for name in ("train", "test")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a BEIR folder (corpus, queries, qrels/)")
    ap.add_argument("out", type=Path, help="the split folder to write")
    ap.add_argument("--test-share", type=float, default=0.3,
                    help="the share of question texts kept for test")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 0.0 < args.test_share < 1.0:
        ap.error("--test-share must be in (0, 1)")
    counts = split(args.source, args.out, args.test_share, args.seed)
    print(f"{args.out}: {counts['train']} train and {counts['test']} test questions "
          "(no text in both)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
