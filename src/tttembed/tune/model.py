"""A fine-tuned embedder on disk: a sentence-transformers folder (what ``st:FOLDER`` loads,
so ``tttembed index DATA --embedder st:FOLDER`` re-embeds a corpus with it) plus
``tttembed-tune.json``, its manifest: the settings, the base model, the digest and count
of the triplets it learned from, the losses, the versions. Written whole or not at all
(:func:`tttembed.core.io.atomic_directory`); a folder that exists is refused unless
``overwrite``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tttembed.core.errors import DataError
from tttembed.core.io import atomic_directory, now_utc, read_json, refuse_existing, versions
from tttembed.core.io import write_json as _write_json
from tttembed.embed.st import TUNED_MANIFEST
from tttembed.tune.pairs import Triplet
from tttembed.tune.train import Tuned
from tttembed.types import PathLike

MANIFEST = TUNED_MANIFEST
FORMAT = "tttembed-tune/1"
VERSIONED = ("torch", "transformers", "sentence-transformers")


def triplets_digest(rows: Sequence[Triplet]) -> str:
    """sha256 over the rows in order (the same rows in the same order: the same digest)."""
    h = hashlib.sha256()
    for r in rows:
        for text in (r.anchor, r.positive, r.negative):
            h.update(text.encode("utf-8"))
            h.update(b"\0")
    return h.hexdigest()


def save_tuned(tuned: Tuned, rows: Sequence[Triplet], out: PathLike, *, source: str,
               overwrite: bool = False) -> Path:
    """Write ``tuned`` (a full fine-tune) and its manifest to the folder ``out``."""
    if tuned.encoder is not None:
        raise DataError("a query-side adapter cannot be saved as an embedder: the index's "
                        "documents would need the frozen model; fine-tune with mode 'full'")
    path = refuse_existing(out, overwrite, "model folder")
    manifest: dict[str, Any] = {
        "format": FORMAT, "created": now_utc(), "settings": tuned.settings.record(),
        "triplets": {"source": source, "rows": len(rows), "sha256": triplets_digest(rows)},
        "steps": len(tuned.losses), "loss_first": tuned.losses[0],
        "loss_last": tuned.losses[-1], "train_s": round(tuned.train_s, 3),
        "versions": versions(VERSIONED)}
    with atomic_directory(path) as tmp:
        tuned.model.save(str(tmp))
        _write_json(tmp / MANIFEST, manifest)
    return path


def read_tuned_manifest(folder: PathLike) -> dict[str, Any]:
    """The manifest of a folder :func:`save_tuned` wrote."""
    got = read_json(Path(folder) / MANIFEST, what="fine-tune manifest")
    if not isinstance(got, dict) or got.get("format") != FORMAT:
        raise DataError(f"{folder}: not a fine-tuned model written by 'tttembed pairs train' "
                        f"(no {FORMAT} manifest)")
    return got


__all__ = ["FORMAT", "MANIFEST", "read_tuned_manifest", "save_tuned", "triplets_digest"]
