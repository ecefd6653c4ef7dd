"""Fixtures for the closed loop's tests: one real PostgreSQL server per test session, and
a fresh feedback store on each backend (``spec`` / ``store``; a module may define its own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import new_database, postgres_server
from tttembed.loop.open import open_store
from tttembed.loop.rows import Store


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a database on a PostgreSQL server started for this session (skipped
    with the reason when PostgreSQL or psycopg is not installed)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install "
                        "'tttembed[loop]'")
    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store spec on a fresh store: a SQLite file or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "loop.sqlite")
    return new_database(request.getfixturevalue("pg_url"), "t" + uuid.uuid4().hex[:16])


@pytest.fixture
def store(spec: str) -> Iterator[Store]:
    """The store of ``spec``, closed after the test."""
    opened = open_store(spec)
    yield opened
    opened.close()
