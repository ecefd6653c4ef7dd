"""What the learner and the serving replicas share besides versions: the learner's record
(:class:`~tttembed.loop.status.LoopState` as written) and its heartbeat, the one-learner
lock, each replica's report of what it serves, and the candidate under an online test.

Two backends, beside the registry they coordinate around: files in its folder
(:mod:`.folder`) or rows in its database (:mod:`.postgres`), one chosen by
:func:`tttembed.loop.coordination.open_coordination`. The registry itself holds only
versions and the served pointer (:mod:`tttembed.registry`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tttembed.core.errors import ConfigError

#: How recent a replica's report must be to be listed.
REPLICA_FRESH_S = 30.0


class LockLost(ConfigError):
    """The learner lost its registry's learner lock to another learner (after the
    database dropped its session): it must stop."""


class Coordination(Protocol):
    """The learner's and the replicas' shared rows of one registry (folder or database)."""

    #: what messages name: the folder, or the database URL without its password
    location: str

    # the learner's record and liveness
    def read_status(self) -> tuple[dict[str, Any] | None, str]: ...
    def write_status(self, record: Mapping[str, Any], *, sync: bool = True) -> None: ...
    def beat(self, record: Mapping[str, Any]) -> None: ...
    def heartbeat(self) -> dict[str, Any] | None: ...
    def learner_lock(self) -> AbstractContextManager[None]: ...
    # replicas
    def report_replica(self, replica: str, record: Mapping[str, Any]) -> None: ...
    def replicas(self, *, fresh_s: float = REPLICA_FRESH_S) -> list[dict[str, Any]]: ...
    # the candidate under an online test
    def candidate(self) -> dict[str, Any] | None: ...
    def candidate_checked(self) -> tuple[dict[str, Any] | None, str]: ...
    def set_candidate(self, version: str, against: str | None,
                      by: str = "learner") -> dict[str, Any]: ...
    def clear_candidate(self) -> None: ...
    def candidate_mark(self) -> tuple[Any, ...]: ...


def checked_candidate(coordination: Coordination, versions: Collection[str]
                      ) -> tuple[dict[str, Any] | None, str]:
    """The one rule for every reader of the candidate (``states list``, ``/v1/loop``):
    the record when it names a version of ``versions`` (the registry's); else None and
    why (a record that cannot be read, or names a missing version; "" for no candidate)."""
    record, problem = coordination.candidate_checked()
    if record is None:
        return None, (f"no candidate: {problem}; the learner's next candidate replaces it "
                      "(or delete it)" if problem else "")
    name = str(record["version"])
    if name not in versions:
        held = ", ".join(sorted(versions, key=lambda n: (len(n), n))) or "none"
        return None, (f"no candidate: the candidate names {name}, which registry "
                      f"{coordination.location} does not hold (versions: {held}); the "
                      "learner's next candidate replaces it")
    return record, ""


def holder(hb: Mapping[str, Any] | None) -> str:
    """A learner's heartbeat in words (who holds the learner lock)."""
    if not hb:
        return "no heartbeat"
    age = time.time() - float(hb.get("time", 0) or 0)
    return f"pid {hb.get('pid')} on {hb.get('host')}, heartbeat {age:.1f} s ago"


def another_learner(location: str, hb: Mapping[str, Any] | None) -> ConfigError:
    """The error a second learner on one registry gets, naming the first."""
    return ConfigError(f"another learner runs on registry {location} ({holder(hb)}): one "
                       "learner per registry; stop it first, or give another --registry")


__all__ = ["REPLICA_FRESH_S", "Coordination", "LockLost", "another_learner",
           "checked_candidate", "holder"]
