"""Chain encoder versions in a state registry (``tttembed states add REGISTRY CHECKPOINT``,
``tttembed serve --chain REGISTRY``): a version of kind ``chain`` holds a checkpoint's
serving files (its manifest and LoRA adapter, not the optimizer's moments) in ``chain/``.

A registry holds one kind: a chain registry's manifest says ``"kind": "chain"`` and the
passage index its encoders were trained against (embedder identity, corpus fingerprint)
and their base model; an encoder trained against another index or on another base model is
refused with the reason, as a state learned for another index is. A database registry
keeps the files packed in the version row (:func:`pack`: name and bytes, length-prefixed;
no pickle), covered by the version's content address.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.core.errors import DataError, StateMismatch

#: A version's (and a chain registry's) kind.
KIND = "chain"
#: The checkpoint's files inside a version folder.
FOLDER = "chain"
#: A database version's packed files in its cached copy (what its id covers).
PACKED = "chain.pack"
#: Checkpoint files a version keeps: the manifest and the adapter folder.
KEPT = ("manifest.json", "adapter")
_LABELS = {"identity": "the passage index's embedder", "corpus_fingerprint":
           "the passage index's corpus (fingerprint)", "base": "the base model"}


def is_chain(manifest: Mapping[str, Any]) -> bool:
    """Whether a version's (or registry's) manifest is of kind ``chain``."""
    return manifest.get("kind") == KIND


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a chain encoder checkpoint's manifest."""
    return Path(path).is_dir() and (Path(path) / "manifest.json").is_file()


def checkpoint_record(path: str | Path) -> dict[str, Any]:
    """What a chain version records of the checkpoint at ``path``, and is checked by."""
    from tttembed.chain.checkpoint import read_checkpoint_manifest

    m = read_checkpoint_manifest(path)
    config = m.get("config") or {}
    return {"kind": KIND, "identity": m.get("index_embedder"),
            "corpus_fingerprint": m.get("corpus_fingerprint") or "",
            "base": config.get("base"), "steps": int(m.get("steps") or 0),
            "regime": config.get("regime"), "epochs_done": m.get("epochs_done")}


def registry_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest a new chain registry gets from its first encoder's record."""
    return {k: record[k] for k in ("kind", "identity", "corpus_fingerprint", "base")}


def check_fits(registry: Mapping[str, Any], record: Mapping[str, Any], what: str) -> None:
    """Refuse (StateMismatch, the reason and the fix) an encoder that does not fit a
    chain registry: another kind of registry, another index or another base model."""
    if not is_chain(registry):
        raise StateMismatch(f"{what}: this registry holds learned states, a chain encoder "
                            "goes in a registry of its own (`tttembed states add NEW_FOLDER "
                            "CHECKPOINT` makes one)")
    for key, label in _LABELS.items():
        mine, theirs = registry.get(key), record.get(key)
        if mine and theirs != mine:
            raise StateMismatch(f"{what}: the encoder was trained against {label} "
                                f"{theirs!r}, the registry's encoders against {mine!r}; "
                                "train it on the registry's index and base model (`tttembed "
                                "chain train DATA --index INDEX`), or add it to another "
                                "registry")


def checkpoint_files(path: str | Path) -> dict[str, bytes]:
    """The serving files of the checkpoint at ``path``, by relative name."""
    root = Path(path)
    out: dict[str, bytes] = {}
    for name in KEPT:
        item = root / name
        items = sorted(p for p in item.rglob("*") if p.is_file()) if item.is_dir() else [item]
        for p in items:
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def write_files(folder: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative names, checked) under ``folder``."""
    for name, data in files.items():
        target = folder / _safe(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def pack(files: Mapping[str, bytes]) -> bytes:
    """Files as one byte string: per file (by name), name length, name, size, bytes."""
    out = bytearray()
    for name in sorted(files):
        raw = name.encode()
        out += len(raw).to_bytes(4, "big") + raw + len(files[name]).to_bytes(8, "big")
        out += files[name]
    return bytes(out)


def unpack(blob: bytes) -> dict[str, bytes]:
    """What :func:`pack` packed (a DataError for torn or foreign bytes)."""
    out: dict[str, bytes] = {}
    at = 0
    try:
        while at < len(blob):
            n = int.from_bytes(blob[at:at + 4], "big")
            name = blob[at + 4:at + 4 + n].decode()
            size = int.from_bytes(blob[at + 4 + n:at + 12 + n], "big")
            at += 12 + n
            if at + size > len(blob):
                raise ValueError("truncated")
            out[_safe(name)] = blob[at:at + size]
            at += size
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"the packed chain encoder files are damaged ({exc})",
                        fix="re-register the checkpoint") from None
    return out


def _safe(name: str) -> str:
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise DataError(f"a chain encoder file name {name!r} leaves its folder",
                        fix="re-register the checkpoint")
    return name


__all__ = ["FOLDER", "KIND", "PACKED", "check_fits", "checkpoint_files", "checkpoint_record",
           "is_chain", "is_checkpoint", "pack", "registry_record", "unpack", "write_files"]
