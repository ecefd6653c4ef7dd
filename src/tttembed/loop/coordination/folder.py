"""The version under an online test: ``candidate.json`` in the registry names the version
the servers interleave with the served one (``serve --interleave P``) until the learner's
sequential test decides. Written whole (atomic), under the registry's writer lock; a
missing or unreadable file means no candidate (the servers serve the served version
alone, which is always safe).

    candidate.json   {"version": "v7", "against": "v6" | null, "since": ISO time,
                      "by": "learner"}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tttembed.core.errors import TTTEmbedError
from tttembed.core.io import now_utc, read_json, write_json
from tttembed.core.locks import writer_lock

CANDIDATE_FILE = "candidate.json"


def read_candidate(root: str | Path) -> dict[str, Any] | None:
    """The candidate record, or None (no candidate, or a file that cannot be read)."""
    path = Path(root) / CANDIDATE_FILE
    if not path.exists():
        return None
    try:
        record = read_json(path)
    except (OSError, ValueError, TTTEmbedError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("version"), str):
        return None
    return record


def set_candidate(root: str | Path, version: str, against: str | None,
                  by: str = "learner") -> dict[str, Any]:
    """Name ``version`` the candidate tested against ``against`` (the served version)."""
    path = Path(root) / CANDIDATE_FILE
    record = {"version": version, "against": against, "since": now_utc(), "by": by}
    with writer_lock(path, wait=True):
        write_json(path, record)
    return record


def clear_candidate(root: str | Path) -> None:
    """No candidate any more (decided, or given up)."""
    path = Path(root) / CANDIDATE_FILE
    with writer_lock(path, wait=True):
        path.unlink(missing_ok=True)


__all__ = ["CANDIDATE_FILE", "clear_candidate", "read_candidate", "set_candidate"]
