"""Where tttembed keeps its caches (embeddings, rewards). Safe to delete at any time."""

from __future__ import annotations

import os
from pathlib import Path

from tttembed.types import PathLike

ENV_CACHE = "TTTEMBED_CACHE_DIR"


def cache_dir(override: PathLike | None = None) -> Path:
    """The cache root: the override, else $TTTEMBED_CACHE_DIR, else ~/.cache/tttembed."""
    if override:
        root = Path(override).expanduser()
    elif os.environ.get(ENV_CACHE):
        root = Path(os.environ[ENV_CACHE]).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "tttembed"
    root.mkdir(parents=True, exist_ok=True)
    return root
