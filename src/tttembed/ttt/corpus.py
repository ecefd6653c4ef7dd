"""Corpus arguments as users give them: a BEIR folder, a corpus.jsonl file or a
``{id: {title, text}}`` dict, read into the BEIR corpus dict."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tttembed.types import PathLike

CorpusArg = PathLike | Mapping[str, Mapping[str, str]]


def read_corpus(data: CorpusArg) -> tuple[dict[str, dict[str, str]], str]:
    """The corpus dict of ``data`` and where it came from (the path, or ``"<dict>"``)."""
    from tttembed.data.beir import load_corpus

    if isinstance(data, Mapping):
        return {k: dict(v) for k, v in data.items()}, "<dict>"
    path = Path(data)
    return load_corpus(path / "corpus.jsonl" if path.is_dir() else path), str(path)
