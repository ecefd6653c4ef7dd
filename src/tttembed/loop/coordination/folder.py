"""The loop's coordination as files in a folder registry (one machine, or a shared file
system), beside the versions (:mod:`tttembed.registry.versions`):

    loop.json            the learner's record (:mod:`tttembed.loop.status`)
    loop.heartbeat       its liveness: pid, host and time
    learner              the lock file the one learner that runs holds
    replicas/NAME.json   each serving replica's report: the version it serves now
    candidate.json       the version under an online test:
                         {"version": "v7", "against": "v6" | null, "since": ISO time,
                          "by": "learner"}

The candidate names the version the servers interleave with the served one (``serve
--interleave P``) until the learner's sequential test decides; written whole (atomic),
under a writer lock. A missing or unreadable ``candidate.json`` means no candidate (the
servers serve the served version alone, which is always safe).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError, DataError, TTTEmbedError
from tttembed.core.io import now_utc, read_json, write_json
from tttembed.core.locks import writer_lock
from tttembed.loop.coordination.base import REPLICA_FRESH_S, another_learner

CANDIDATE_FILE = "candidate.json"
#: Where serving replicas report what they serve.
REPLICAS = "replicas"
#: The learner's record and its heartbeat (:mod:`tttembed.loop.status`).
STATUS_FILE = "loop.json"
HEARTBEAT_FILE = "loop.heartbeat"
#: The lock file one learner holds while it runs.
LEARNER_LOCK = "learner"


class FolderCoordination:
    """The coordination files of the registry folder ``root`` (which need not be a
    registry yet: a learner's record is read from any folder)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(root)

    # -- the learner's record (loop.json), heartbeat and lock -------------------------
    def read_status(self) -> tuple[dict[str, Any] | None, str]:
        """The learner's record (None: none, or unreadable) and why it could not be read
        ("" when it could or there is none): a broken file is reported, never read as
        empty."""
        return read_status_file(self.root)

    def write_status(self, record: Mapping[str, Any], *, sync: bool = True) -> None:
        write_json(self.root / STATUS_FILE, dict(record), sync=sync)

    def beat(self, record: Mapping[str, Any]) -> None:
        write_json(self.root / HEARTBEAT_FILE, dict(record), sync=False)

    def heartbeat(self) -> dict[str, Any] | None:
        try:
            got = read_json(self.root / HEARTBEAT_FILE, what="learner heartbeat")
        except Exception:  # noqa: BLE001  (no heartbeat: judged by the pid)
            return None
        return got if isinstance(got, dict) else None

    @contextmanager
    def learner_lock(self) -> Iterator[None]:
        """Hold the registry's learner lock while the learner runs; another learner's
        is a ConfigError naming it (its pid, from the lock file and its heartbeat)."""
        try:
            with writer_lock(self.root / LEARNER_LOCK):
                yield
        except ConfigError as exc:
            if "another process" not in str(exc):
                raise
            raise another_learner(str(self.root), self.heartbeat()) from None

    # -- replicas ---------------------------------------------------------------------
    def report_replica(self, replica: str, record: Mapping[str, Any]) -> None:
        """A serving replica's report (``replicas/NAME.json``): what it serves, and when."""
        folder = self.root / REPLICAS
        folder.mkdir(exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", replica)
        write_json(folder / f"{safe}.json", {"replica": replica, "time": time.time(),
                                             **dict(record)}, sync=False)

    def replicas(self, *, fresh_s: float = REPLICA_FRESH_S) -> list[dict[str, Any]]:
        """The replicas that reported within ``fresh_s`` seconds (each its served
        version, generation and whether it follows the registry), by name."""
        folder = self.root / REPLICAS
        out = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                got = read_json(path, what="replica report")
            except DataError:
                continue
            at = got.get("time") if isinstance(got, dict) else None
            if isinstance(at, (int, float)) and time.time() - at <= fresh_s:
                out.append(got)
        return out

    # -- the candidate under an online test (candidate.json) --------------------------
    def candidate(self) -> dict[str, Any] | None:
        return read_candidate(self.root)

    def candidate_checked(self) -> tuple[dict[str, Any] | None, str]:
        return read_candidate_checked(self.root)

    def set_candidate(self, version: str, against: str | None,
                      by: str = "learner") -> dict[str, Any]:
        return set_candidate(self.root, version, against, by)

    def clear_candidate(self) -> None:
        clear_candidate(self.root)

    def candidate_mark(self) -> tuple[Any, ...]:
        """What changes when the candidate does: its file's time and size."""
        try:
            cs = os.stat(self.root / CANDIDATE_FILE)
            return (cs.st_mtime_ns, cs.st_size)
        except FileNotFoundError:
            return (0, 0)


def read_status_file(root: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``root/loop.json`` parsed (None: absent or unreadable) and why not."""
    path = Path(root) / STATUS_FILE
    if not path.exists():
        return None, ""
    try:
        got = read_json(path, what="loop status")
    except Exception as exc:  # noqa: BLE001  (a reader never fails on the learner's file)
        return None, " ".join(str(exc).split())
    if not isinstance(got, dict):
        return None, f"{path}: the loop status is not a JSON object (the learner rewrites it)"
    return got, ""


def read_candidate(root: str | Path) -> dict[str, Any] | None:
    """The candidate record, or None (no candidate, or a file that cannot be read)."""
    return read_candidate_checked(root)[0]


def read_candidate_checked(root: str | Path) -> tuple[dict[str, Any] | None, str]:
    """The candidate record (None: none) and why a file there is not one ("" when it is,
    or when there is no file)."""
    path = Path(root) / CANDIDATE_FILE
    if not path.exists():
        return None, ""
    try:
        record = read_json(path)
    except (OSError, ValueError, TTTEmbedError) as exc:
        return None, " ".join(str(exc).split())
    if not isinstance(record, dict) or not isinstance(record.get("version"), str):
        return None, f"{path} is not a candidate record (no version name)"
    return record, ""


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


__all__ = ["CANDIDATE_FILE", "HEARTBEAT_FILE", "LEARNER_LOCK", "REPLICAS", "STATUS_FILE",
           "FolderCoordination", "clear_candidate", "read_candidate",
           "read_candidate_checked", "read_status_file",
           "set_candidate"]
