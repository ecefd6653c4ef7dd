"""Fixtures for the closed loop's tests: one real PostgreSQL server per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import postgres_server


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a database on a PostgreSQL server started for this session (skipped
    with the reason when PostgreSQL or psycopg is not installed)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install "
                        "'tttembed[loop]'")
    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url
