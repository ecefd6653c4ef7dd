"""Multi-hop question sets: chains_<split>.jsonl next to a BEIR corpus.

One question per line: ``qid``, ``question``, ``chain`` (gold doc ids in hop order) are
required; ``answer``, ``type`` (strings) and ``context_doc_ids`` (the question's own
distractor pool) are optional. Other fields (chain_titles, supporting_facts, evidences,
...) are ignored.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from tttembed.core.errors import DataError
from tttembed.data.beir import LAYOUT, load_corpus
from tttembed.data.jsonl import duplicate, get_id, get_id_list, get_str, iter_objects, shown


@dataclass(frozen=True)
class Chain:
    """One multi-hop question with its gold passages in reasoning-chain order."""

    qid: str
    question: str
    chain: tuple[str, ...]
    type: str = ""
    answer: str = ""
    context_doc_ids: tuple[str, ...] = ()

    @property
    def hops(self) -> int:
        """Number of gold passages."""
        return len(self.chain)


def load_chains(path: str | Path, *, corpus_ids: Collection[str] | None = None) -> list[Chain]:
    """chains_<split>.jsonl -> [Chain] in file order; ids are checked when corpus_ids given."""
    path = Path(path)
    chains: list[Chain] = []
    lines: dict[str, int] = {}
    for line, obj in iter_objects(path, what="chains",
                                  missing_fix="expected a chains_<split>.jsonl file"):
        qid = get_id(obj, "qid", path, line)
        question = get_str(obj, "question", path, line, nonempty=True)
        chain = get_id_list(obj, "chain", path, line, nonempty=True)
        kind = get_str(obj, "type", path, line, required=False)
        answer = get_str(obj, "answer", path, line, required=False)
        context = get_id_list(obj, "context_doc_ids", path, line, required=False)
        if qid in lines:
            raise duplicate("qid", qid, lines[qid], path, line)
        if corpus_ids is not None:
            for key, ids in (("chain", chain), ("context_doc_ids", context)):
                for doc_id in ids:
                    if doc_id not in corpus_ids:
                        raise DataError(f"{key} names unknown document {shown(doc_id)}",
                                        path=path, line=line,
                                        fix="add the document to corpus.jsonl or fix the id")
        lines[qid] = line
        chains.append(Chain(qid, question, chain, kind, answer, context))
    return chains


def load_multihop(path: str | Path, split: str) -> tuple[dict[str, dict[str, str]], list[Chain]]:
    """A multi-hop folder: (corpus, chains of the split); ids checked against the corpus."""
    root = Path(path)
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is a file, not a folder"
        raise DataError(f"multi-hop folder {what}", path=root,
                        fix=f"{LAYOUT}, plus chains_<split>.jsonl")
    if not split or "/" in split or "\\" in split or split.startswith("."):
        raise DataError(f"bad split name {shown(split)}", path=root,
                        fix="use a split name such as 'test'")
    chains_path = root / f"chains_{split}.jsonl"
    if not chains_path.is_file():
        available = sorted(p.stem[len("chains_"):] for p in root.glob("chains_*.jsonl"))
        listed = ", ".join(available) if available else "none"
        raise DataError(f"no chains for split {split!r} (available splits: {listed})",
                        path=chains_path, fix="choose one of the available splits")
    corpus = load_corpus(root / "corpus.jsonl")
    return corpus, load_chains(chains_path, corpus_ids=corpus)
