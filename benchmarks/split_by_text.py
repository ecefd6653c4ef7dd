"""Split a BEIR folder's judged questions into train and test by their text.

    python benchmarks/split_by_text.py ../shared/data/arguana /tmp/arguana_split
        [--test-share 0.3] [--seed 0] [--overwrite]

Questions are grouped by their normalised text (:func:`tttembed.adapt.scopes.query_digest`:
what a query-wise state is keyed by), so no test question shares a text with a train
question (ArguAna's questions are arguments, some of them asked under several ids). A
group goes to test when the sha256 of ``seed`` and its digest falls under
``--test-share``: deterministic, independent of file order. Every split's judgments of
the source are pooled first (ArguAna has test judgments only). The output folder holds
``queries.jsonl`` (the judged questions), ``qrels/train.tsv``, ``qrels/test.tsv`` and
``corpus.jsonl`` (a symbolic link to the source's: the corpus is read, never copied).
``benchmarks/bench_soak.py --data OUT`` then streams the train questions and replays
the test ones. The output folder must be new or empty (``--overwrite`` replaces the split
files of one that is not), and never the source or a folder above it.
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


class SplitError(ValueError):
    """A source folder this script cannot split (one line: the path and what to fix)."""


def _qrels(folder: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for path in sorted((folder / "qrels").glob("*.tsv")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()[1:], 2):
            if line.strip():
                cells = line.split("\t")
                if len(cells) < 3:
                    raise SplitError(f"{path}:{n}: not a qrels row (query-id, corpus-id, "
                                     "score separated by tabs): fix or remove the line")
                out.setdefault(cells[0], {})[cells[1]] = cells[2]
    return out


def _judged_texts(source: Path, qrels: dict[str, dict[str, str]]) -> dict[str, str]:
    """The text of each judged question of ``source/queries.jsonl``, by id."""
    path = source / "queries.jsonl"
    texts = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                qid, text = row["_id"], row["text"]
            except (ValueError, TypeError, KeyError) as exc:
                raise SplitError(f"{path}:{n}: not a BEIR query row ({exc!r}): each line is "
                                 '{"_id": ..., "text": ...}') from None
            if qid in qrels:
                texts[qid] = text
    return texts


def _write(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file and one rename: a link already there is
    replaced, never written through (it may point into the source)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def split(source: Path, out: Path, test_share: float = 0.3, seed: int = 0) -> dict[str, int]:
    """Write the split folder ``out`` (module docstring); the questions per split."""
    if out.resolve() == source.resolve():
        raise SplitError(f"{out}: the output folder is the source folder; name another one")
    qrels = _qrels(source)
    texts = _judged_texts(source, qrels)
    side = {}
    for qid, text in texts.items():
        h = hashlib.sha256(f"{seed}\0{query_digest(text)}".encode()).digest()
        side[qid] = "test" if int.from_bytes(h[:8], "big") / 2**64 < test_share else "train"
    if (out / "qrels").is_symlink():
        (out / "qrels").unlink()
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    _write(out / "queries.jsonl", "".join(
        json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
        for q, t in texts.items()))
    for name in ("train", "test"):
        rows = [f"{q}\t{d}\t{g}" for q in texts if side[q] == name
                for d, g in qrels[q].items()]
        _write(out / "qrels" / f"{name}.tsv",
               "\n".join(["query-id\tcorpus-id\tscore", *rows]) + "\n")
    corpus = out / "corpus.jsonl"
    if corpus.is_symlink() or corpus.exists():
        corpus.unlink()
    corpus.symlink_to((source / "corpus.jsonl").resolve())
    return {name: sum(1 for q in texts if side[q] == name) for name in ("train", "test")}


def _check_paths(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2, one line) a source that is not a BEIR folder, an output that is the
    source or holds it, a file, or a folder with something in it (unless --overwrite)."""
    source, out = args.source, args.out
    if not source.is_dir():
        ap.error(f"{source}: no such folder (give a BEIR folder: corpus.jsonl, "
                 "queries.jsonl, qrels/*.tsv)")
    for name in ("queries.jsonl", "corpus.jsonl"):
        if not (source / name).is_file():
            ap.error(f"{source}: no {name} (give a BEIR folder: corpus.jsonl, "
                     "queries.jsonl, qrels/*.tsv)")
    src, dst = source.resolve(), out.resolve()
    if dst == src or dst in src.parents:
        ap.error(f"{out}: the output folder is (or holds) the source folder {source}; "
                 "name a new folder")
    if out.exists() and not out.is_dir():
        ap.error(f"{out}: exists and is not a folder; name a new folder")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        ap.error(f"{out}: the folder is not empty; name a new folder, or pass "
                 "--overwrite to replace its split")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a BEIR folder (corpus, queries, qrels/)")
    ap.add_argument("out", type=Path, help="the split folder to write (new or empty)")
    ap.add_argument("--test-share", type=float, default=0.3,
                    help="the share of question texts kept for test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true",
                    help="replace the split files of an output folder that is not empty")
    args = ap.parse_args(argv)
    if not 0.0 < args.test_share < 1.0:
        ap.error("--test-share must be in (0, 1)")
    _check_paths(ap, args)
    try:
        if not _judged_texts(args.source, _qrels(args.source)):
            raise SplitError(f"{args.source}: no question of queries.jsonl is judged in "
                             "qrels/*.tsv; nothing to split (check the folder's qrels)")
        counts = split(args.source, args.out, args.test_share, args.seed)
    except (SplitError, UnicodeDecodeError, OSError) as exc:
        print(f"split_by_text.py: error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {counts['train']} train and {counts['test']} test questions "
          "(no text in both)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
