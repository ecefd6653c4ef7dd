"""tttembed: make a frozen embedding retriever better after deployment.

The public API is :mod:`tttembed.api`, re-exported here (``import tttembed as tt``;
``tt.learn(...)``). Importing stays light: the API's names load on first use, and heavy
libraries (torch, transformers, faiss) inside the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tttembed._version import __version__ as __version__

if TYPE_CHECKING:  # pragma: no cover
    from tttembed.api import *  # noqa: F403


def _api() -> Any:
    import importlib

    return importlib.import_module("tttembed.api")


def __getattr__(name: str) -> Any:
    if not name.startswith("__") and name != "api" and name in _api().__all__:
        return getattr(_api(), name)
    raise AttributeError(f"module 'tttembed' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_api().__all__])
