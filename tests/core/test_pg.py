"""PostgreSQL plumbing without a server: the URL as messages show it."""

from __future__ import annotations

from tttembed.core.pg import mask_url, scrub


def test_mask_url() -> None:
    assert mask_url("postgresql://u:p%40ss@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert mask_url("postgresql://h1:5432,h2:5433/db?sslmode=require") == (
        "postgresql://h1:5432,h2:5433/db?sslmode=require")
    assert mask_url("postgresql://u:pw@h1,h2/db?password=x&sslmode=require") == (
        "postgresql://u:***@h1,h2/db?password=***&sslmode=require")
    assert mask_url("postgresql://[::1/db") == "postgresql://[::1/db"


def test_scrub_keeps_one_line_without_the_password() -> None:
    exc = RuntimeError("connection to postgresql://u:s3cret@h/db failed:\n  refused")
    assert scrub(exc, "postgresql://u:s3cret@h/db") == (
        "connection to postgresql://u:***@h/db failed: refused")
    assert scrub(RuntimeError(""), "postgresql://h/db") == "RuntimeError"
