"""Serialising what artifacts hold: text and JSON hashes, JSON-safe values, versions.

Pure functions (no file is written here; :mod:`tttembed.core.io` writes).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import platform
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from tttembed._version import __version__

#: Distributions whose versions manifests and reports record (absent ones are skipped).
DISTRIBUTIONS = ("numpy", "faiss-cpu", "faiss-gpu", "torch", "sentence-transformers",
                 "transformers", "peft", "bm25s")


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


# --- versions --------------------------------------------------------------------------

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
