"""Shared fixtures, and the tiers: each test is marked with what it starts (PostgreSQL,
Chromium, a venv, Ray, a real model, a child process) and the rest are ``fast``. Tests run
offline: the only real model is the bundled MiniLM."""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# --- Tiers -----------------------------------------------------------------------------
# Every test is marked with what it starts; plain `pytest` runs the tests that start none
# (marker `fast`), a path or a `-m` runs what it names (the README's `-m "not slow"`: all).
# tests/test_tiers.py holds these tables to account.

#: The tiers, by what a test starts.
TIERS = {
    "postgres": "a PostgreSQL server (initdb, pg_ctl)",
    "browser": "headless Chromium",
    "venv": "a virtual environment built from a page's install line",
    "ray": "a local Ray cluster",
    "model": "a real model (the bundled MiniLM, a torch model built for the test)",
    "process": "a child process (python -c, the CLI, `tttembed serve`, a benchmark, mount)",
}
FAST = "fast"
#: A test is in a tier when a fixture of its closure (its own, or one its fixtures use)
#: starts it ...
TIER_FIXTURES = {
    "postgres": ("pg_url", "pg_cluster"),
    "ray": ("ray_local",),
    "model": ("minilm", "e5", "tiny_cross_encoder", "one_label", "model_dir"),
    "process": ("tmpfs", "built", "tiny_index", "pg_cluster"),
}
#: ... when its code, or a function of its own module that it calls, names one of these
#: (the tests that start something without a fixture) ...
TIER_CALLS = {
    "postgres": ("postgres_server", "postgres_instance"),
    "browser": ("dump_dom", "screenshot", "run_chromium"),
    "venv": ("page_venv",),
    "process": ("subprocess", "Popen", "multiprocessing", "run_py", "run_cli"),
}
#: ... when a fixture parameter names it (the stores' `sqlite` / `postgresql` pairs) ...
TIER_PARAMS = {"postgresql": "postgres"}
#: ... or when its module says so (`pytestmark = pytest.mark.<tier>`).


def _names(fn: Any, seen: set[Any] | None = None) -> set[str]:
    """The names ``fn``'s code uses (globals, attributes, imports; nested functions
    included) and, transitively, those of the functions of its own module it calls."""
    seen = set() if seen is None else seen
    code = getattr(fn, "__code__", None)
    if code is None or fn in seen:
        return set()
    seen.add(fn)
    names: set[str] = set()
    codes = [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    module = getattr(fn, "__globals__", {})
    for name in list(names):
        helper = module.get(name)
        if isinstance(helper, types.FunctionType) and helper.__module__ == module.get("__name__"):
            names |= _names(helper, seen)
    return names


def item_tiers(item: pytest.Item) -> set[str]:
    """The tiers of one collected test (see the tables above)."""
    found = {m.name for m in item.iter_markers()} & set(TIERS)
    fixtures = set(getattr(item, "fixturenames", ()))
    found |= {tier for tier, names in TIER_FIXTURES.items() if fixtures & set(names)}
    fn = getattr(item, "function", None)
    if fn is not None:
        used = _names(fn)
        found |= {tier for tier, names in TIER_CALLS.items() if used & set(names)}
    params = getattr(getattr(item, "callspec", None), "params", {})
    found |= {TIER_PARAMS[v] for v in params.values() if isinstance(v, str) and v in TIER_PARAMS}
    return found


def pytest_configure(config: pytest.Config) -> None:
    """Plain ``pytest`` (no path, no ``-m``) runs the fast tier; a path or a ``-m`` runs
    what it names, every tier (``-m "not slow"``: the whole suite, as CI runs it)."""
    if not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        config.option.markexpr = FAST


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tiers, and ``fast`` when it has none (and is not slow):
    runs before ``-m`` selects."""
    for item in items:
        tiers = item_tiers(item)
        for tier in sorted(tiers):
            item.add_marker(tier)
        if not tiers and item.get_closest_marker("slow") is None:
            item.add_marker(FAST)


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that set up a tier's fixture without that tier's marker (a fixture asked for
    at run time, ``request.getfixturevalue``) is an error: give its module the marker."""
    yield
    used = set(request.fixturenames)
    have = {m.name for m in request.node.iter_markers()}
    missing = sorted(t for t, names in TIER_FIXTURES.items() if used & set(names) and t not in have)
    if missing:
        pytest.fail(f"{request.node.nodeid} starts {', '.join(missing)} without the marker: "
                    f"add `pytestmark = pytest.mark.{missing[0]}` (see tests/conftest.py)")
