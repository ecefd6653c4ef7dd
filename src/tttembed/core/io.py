"""The one home of artifact I/O: atomic files and folders, JSON, manifests, versions.

Every artifact tttembed writes (index folder, state file, run, report, cache entry,
checkpoint) goes through here, so the rule holds everywhere: it is written into a
temporary path beside its destination and moved into place with one ``os.replace``; a
crash leaves the old artifact (or nothing), never half of a new one.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import platform
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from tttembed import __version__
from tttembed.core.errors import ConfigError, DataError

#: Distributions whose versions manifests and reports record (absent ones are skipped).
DISTRIBUTIONS = ("numpy", "faiss-cpu", "faiss-gpu", "torch", "sentence-transformers",
                 "transformers", "peft", "bm25s")
MANIFEST = "manifest.json"


# --- hashing ------------------------------------------------------------------------------

def text_digest(text: str) -> bytes:
    """sha256 of the text as UTF-8 (lone surrogates kept, never an error): 32 bytes.

    The one text hash of the project: the embedding cache and the reward ledger key on it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def text_hash(text: str) -> str:
    """:func:`text_digest` as hex."""
    return text_digest(text).hex()


def json_hash(obj: Any, n: int = 32) -> str:
    """Hex sha256 (first ``n`` characters) of ``obj`` as canonical JSON: a cache key."""
    blob = json.dumps(obj, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:n]


# --- atomic writes ------------------------------------------------------------------------

def _temp_name(path: Path, kind: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{kind}-{uuid.uuid4().hex[:8]}")


def refuse_existing(path: str | os.PathLike[str], overwrite: bool, what: str = "") -> Path:
    """``path``, or a ConfigError when it exists and ``overwrite`` is false."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise ConfigError(f"{what + ' ' if what else ''}{path} already exists; pass "
                          "--overwrite (overwrite=True) to replace it, or choose another path")
    return path


@contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Yield a file open on a temporary sibling of ``path``; on success it replaces
    ``path`` in one rename, on any exception it is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) atomically; creates the folder."""
    with atomic_file(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_file(path, "wb") as fh:
        fh.write(data)
    return Path(path)


@contextmanager
def atomic_directory(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``out`` (old version moved
    aside, then removed). A crash removes the temporary folder and leaves ``out`` as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(out)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = _temp_name(out, "old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --- JSON ---------------------------------------------------------------------------------

def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if hasattr(k, "item") and getattr(k, "ndim", None) == 0:  # numpy scalar
        k = k.item()
    if k is None or isinstance(k, bool):
        return json.dumps(k)
    return str(k)


def clean(obj: Any) -> Any:
    """A JSON-safe copy: NaN/inf become None, tuples and numpy arrays lists, numpy scalars
    Python numbers, mapping keys strings, sets sorted lists; anything else that JSON cannot
    hold (a Path, a datetime) becomes ``str(obj)``."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {_key(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [clean(v) for v in sorted(obj, key=repr)]
    if hasattr(obj, "tolist") and hasattr(obj, "ndim"):  # numpy array or scalar
        return clean(obj.tolist())
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return clean(float(obj))
    return str(obj)


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``clean(obj)`` as JSON with sorted keys (NaN as null), UTF-8 kept."""
    return json.dumps(clean(obj), indent=indent, sort_keys=True, ensure_ascii=False)


def write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> Path:
    """Atomic JSON write of ``clean(obj)`` with sorted keys (NaN as null)."""
    return write_text(path, dumps(obj, indent) + "\n")


def read_json(path: str | os.PathLike[str], *, what: str = "JSON file",
              fix: str | None = None) -> Any:
    """Parse a JSON file; a missing or corrupt file is a DataError naming the path."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{what} not found", path=path, fix=fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"corrupt {what}: {exc}", path=path, fix=fix) from exc


# --- manifests and versions ---------------------------------------------------------------

def versions(distributions: Sequence[str] = DISTRIBUTIONS) -> dict[str, str]:
    """``tttembed`` and ``python`` versions, then each installed distribution's (absent ones
    are skipped). Package metadata only: nothing heavy is imported."""
    out = {"tttembed": __version__, "python": platform.python_version()}
    for name in distributions:
        if name in out:
            continue
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_manifest(folder: str | os.PathLike[str], *, fmt: str, what: str,
                  fix: str) -> dict[str, Any]:
    """``folder/manifest.json`` of an artifact whose ``format`` must be ``fmt``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{what} {folder} does not exist", fix=fix)
    path = folder / MANIFEST
    if not path.exists():
        raise DataError(f"{folder} is not a {what} (no {MANIFEST})", fix=fix)
    manifest = read_json(path, what=f"{what} manifest", fix=fix)
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise DataError(f"not a {what} manifest (format is not {fmt!r})", path=path, fix=fix)
    return manifest


def write_manifest(folder: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Path:
    return write_json(Path(folder) / MANIFEST, manifest)


__all__ = ["DISTRIBUTIONS", "MANIFEST", "atomic_directory", "atomic_file", "clean", "dumps",
           "json_hash", "now_utc", "read_json", "read_manifest", "refuse_existing",
           "text_digest", "text_hash", "versions", "write_bytes", "write_json",
           "write_manifest", "write_text"]
