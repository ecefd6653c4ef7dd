"""Shared fixtures. Tests run offline: the only real model is the bundled MiniLM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def minilm():
    """The bundled all-MiniLM-L6-v2 as a tttembed Embedder, loaded once per session."""
    from tttembed.embed import DEFAULT_EMBEDDER, get_embedder

    return get_embedder(DEFAULT_EMBEDDER)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache directory so that tests never share cached state."""
    monkeypatch.setenv("TTTEMBED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def shared_dataset(name: str) -> Path:
    """Path of a dataset under ../shared/data, or skip the test when it is absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"shared dataset {name!r} not found at {path}")
    return path
