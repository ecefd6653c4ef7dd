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

import hashlib
import json
import os
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
    """The serving files of the checkpoint at ``path``, by relative name, each checked
    (:func:`check_files`): a link inside the checkpoint (whose target may lie outside it)
    is refused, never followed."""
    root = Path(path)
    out: dict[str, bytes] = {}
    for name in KEPT:
        item = root / name
        _no_link(item, root)
        if not item.is_dir():
            if item.is_file():
                out[name] = item.read_bytes()
            continue
        for folder, dirs, names in os.walk(item, followlinks=False):
            for entry in sorted([*dirs, *names]):
                _no_link(Path(folder) / entry, root)
            for entry in sorted(names):
                p = Path(folder) / entry
                out[p.relative_to(root).as_posix()] = p.read_bytes()
    check_files(out, root)
    return out


def _no_link(p: Path, root: Path) -> None:
    if p.is_symlink():
        raise DataError(f"{p.relative_to(root).as_posix()} is a symbolic link: a registry "
                        "copies a checkpoint's own files only", path=root,
                        fix="replace the link with the file itself, or train the "
                            "checkpoint again")


#: Weights in a pickle format (loading them runs code): never added.
PICKLE = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
ADAPTER = "adapter/adapter_model.safetensors"
ADAPTER_CONFIG = "adapter/adapter_config.json"


def check_files(files: Mapping[str, bytes], root: str | Path) -> None:
    """Refuse (DataError, one line) checkpoint files a server could not load: pickle
    weights, a missing or torn ``adapter_model.safetensors`` (its header and the tensor
    bytes it announces), an ``adapter_config.json`` that is no adapter configuration."""
    fix = "train the checkpoint again ('tttembed chain train DATA --out FOLDER')"
    pickled = sorted(n for n in files if n.lower().endswith(PICKLE))
    if pickled:
        raise DataError(f"{pickled[0]} holds pickle weights (loading them runs code); "
                        "only safetensors weights are added", path=root, fix=fix)
    for name in (ADAPTER, ADAPTER_CONFIG):
        if name not in files:
            raise DataError(f"the checkpoint has no {name}", path=root, fix=fix)
    problem = safetensors_problem(files[ADAPTER])
    if problem:
        raise DataError(f"{ADAPTER} is damaged ({problem})", path=root, fix=fix)
    try:
        config = json.loads(files[ADAPTER_CONFIG])
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{ADAPTER_CONFIG} is not JSON ({exc})", path=root, fix=fix) from None
    if not isinstance(config, dict) or "peft_type" not in config or "r" not in config:
        raise DataError(f"{ADAPTER_CONFIG} is no adapter configuration (no peft_type or r)",
                        path=root, fix=fix)


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                "I8": 1, "U8": 1, "BOOL": 1}


def safetensors_problem(blob: bytes) -> str | None:
    """What is wrong with a safetensors file's bytes (None: its header parses, every
    tensor's bytes lie inside the file, and the file ends where its last tensor does)."""
    if len(blob) < 8:
        return f"{len(blob)} bytes, no header"
    size = int.from_bytes(blob[:8], "little")
    if size <= 0 or 8 + size > len(blob):
        return f"the header announces {size} bytes, the file holds {len(blob) - 8}"
    try:
        header = json.loads(blob[8:8 + size])
    except (ValueError, UnicodeDecodeError):
        return "the header is not JSON"
    if not isinstance(header, dict):
        return "the header is not a table of tensors"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = (int(x) for x in info["data_offsets"])
            count = 1
            for dim in info["shape"]:
                count *= int(dim)
            width = _DTYPE_BYTES.get(str(info["dtype"]))
        except (KeyError, TypeError, ValueError):
            return f"tensor {name!r} has no valid offsets, shape or dtype"
        if width is not None and stop - start != count * width:
            return f"tensor {name!r} announces {stop - start} bytes for {count} values"
        end = max(end, stop)
    if 8 + size + end != len(blob):
        return f"the tensors end at byte {8 + size + end}, the file at {len(blob)}"
    return None


def files_digest(files: Mapping[str, bytes]) -> str:
    """The content digest of a checkpoint's serving files (what a duplicate shares)."""
    return hashlib.sha256(pack(files)).hexdigest()


def holding(versions: Any, digest: str) -> Any:
    """The first unbroken chain version whose files have the content ``digest`` (an
    older version that records none: its stored files' digest), or None."""
    for v in versions:
        if getattr(v, "broken", False) or not is_chain(v.manifest):
            continue
        mine = v.manifest.get("chain_digest")
        if mine is None:
            try:
                mine = files_digest(_stored(Path(v.path) / FOLDER))
            except OSError:
                continue
        if mine == digest:
            return v
    return None


def _stored(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


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


__all__ = ["FOLDER", "KIND", "PACKED", "check_files", "check_fits", "checkpoint_files",
           "checkpoint_record", "files_digest", "holding", "safetensors_problem",
           "is_chain", "is_checkpoint", "pack", "registry_record", "unpack", "write_files"]
