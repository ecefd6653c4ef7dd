"""The index manifest: its format, the manifest every backend stores with its vectors,
reading it, and the identity check (embedder and dimension) every open makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tttembed._version import __version__
from tttembed.core.errors import DataError, StateMismatch
from tttembed.core.io import now_utc
from tttembed.core.io import read_manifest as _read_manifest
from tttembed.types import PathLike

FORMAT = "tttembed-index"
BUILD_FIX = "build it with 'tttembed index DATA --out DIR'"
FORMAT_VERSION = 1


def build_manifest(vectors: np.ndarray, *, embedder_identity: str, embedder_spec: str,
                   corpus_fingerprint: str, index_type: str, index_params: dict[str, Any],
                   versions: dict[str, str], extra: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest every backend stores with its vectors."""
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "embedder": embedder_identity, "embedder_spec": embedder_spec,
        "dim": int(vectors.shape[1]), "metric": "inner_product", "normalized": True,
        "n_docs": len(vectors), "corpus_fingerprint": corpus_fingerprint,
        "index_type": index_type, "index_params": index_params,
        "tttembed_version": __version__, **versions,
        "created": now_utc(),
        **(extra or {}),
    }


#: What every backend needs from a manifest to open an index (FAISS folders need more).
REQUIRED = {"embedder": str, "embedder_spec": str, "dim": int, "n_docs": int}
REQUIRED_FAISS = {**REQUIRED, "index_type": str, "index_params": dict}


def read_index_manifest(path: PathLike) -> dict[str, Any]:
    """An index folder's manifest (a DataError naming the path when absent or corrupt)."""
    return _read_manifest(path, fmt=FORMAT, what="tttembed index", fix=BUILD_FIX)


def check_fields(where: PathLike, manifest: dict[str, Any],
                 required: dict[str, type] = REQUIRED) -> None:
    """A DataError naming the first field of ``required`` the manifest lacks or holds with
    the wrong type (an edited, truncated or hand-made manifest), never a KeyError later."""
    for key, kind in required.items():
        value = manifest.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, kind):
            state = "lacks" if key not in manifest else f"has a bad {kind.__name__}"
            raise DataError(f"index manifest {state} field {key!r}", path=where,
                            fix=BUILD_FIX.replace("--out DIR", "--out DIR --overwrite")
                            .replace("build it", "rebuild the index"))


def check_identity(path: Path | str, manifest: dict[str, Any], expected_identity: str | None,
                   expected_dim: int | None) -> None:
    """Refuse an index built by another embedder or dimension (StateMismatch)."""
    if expected_identity is not None and manifest["embedder"] != expected_identity:
        raise StateMismatch(
            f"index {path} was built with embedder {manifest['embedder']!r}, not "
            f"{expected_identity!r}; use the same --embedder or rebuild the index")
    if expected_dim is not None and int(manifest["dim"]) != int(expected_dim):
        raise StateMismatch(f"index {path} has dimension {manifest['dim']}, the embedder "
                            f"gives {expected_dim}; rebuild the index with this embedder")
