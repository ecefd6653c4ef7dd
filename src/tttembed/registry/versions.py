"""The folder backend of the state registry (:mod:`tttembed.registry.base`): what the
closed loop registers and promotes and what ``tttembed serve --registry DIR`` serves, on
one machine or a shared file system (several machines without one: the PostgreSQL
backend, :mod:`tttembed.registry.postgres`).

Layout of ``DIR``::

    registry.json          the registry's manifest (format, index identity, corpus)
    versions/v1/           one folder per version, written whole or not at all, and
                           never again (write-once):
        vectors.npz        the state (its JSON sidecar beside it)
        version.json       the version's manifest: parent, time, pairs, evidence,
                           the learner's verdict and why
    served.json            the version served now and the history of promotions and
                           rollbacks (replaced in one rename: a reader sees old or new)
    replicas/NAME.json     each serving replica's report: the version it serves now
    candidate.json         the version under an online test (:mod:`.candidate`)
    loop.json              the learner's record; loop.heartbeat its liveness; .learner.lock
                           held by the one learner that runs

A version folder is immutable once written: whether and when a version was promoted is
read from ``served.json``'s history, the registry's own record, not from the version.
Promoting or rolling back rewrites only ``served.json`` (under the registry's writer
lock); a server polls it and swaps the new state in whole. Nothing here learns or
judges: :mod:`tttembed.loop` does.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tttembed.adapt.state import AdaptState, save_state
from tttembed.core.errors import ConfigError, DataError
from tttembed.core.io import atomic_directory, now_utc, read_json, write_json
from tttembed.core.locks import writer_lock
from tttembed.registry.base import (
    DIFF_TOL,
    FORMAT,
    FORMAT_VERSION,
    REPLICA_FRESH_S,
    STATE_FILE,
    RegistryBase,
    Survey,
    Version,
    index_record,
    key_change,
    promotions,
    version_number,
)
from tttembed.registry.candidate import clear_candidate, read_candidate, set_candidate

if TYPE_CHECKING:
    from tttembed.loop.store import Store

#: Where serving replicas report what they serve.
REPLICAS = "replicas"
#: The learner's record and its heartbeat (:mod:`tttembed.loop.status`).
STATUS_FILE = "loop.json"
HEARTBEAT_FILE = "loop.heartbeat"
#: The lock file one learner holds while it runs.
LEARNER_LOCK = "learner"
_NAME = re.compile(r"v(\d+)")
_FIX = "give the folder `tttembed serve --learn --registry DIR` or `tttembed loop` made"


class Registry(RegistryBase):
    """Versions of one index's states under the folder ``root`` (created with
    ``create=True``)."""

    def __init__(self, root: str | Path, *, create: bool = False,
                 index: Mapping[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        manifest_path = self.root / "registry.json"
        if not manifest_path.exists():
            if not create:
                raise DataError("not a state registry (no registry.json)", path=self.root,
                                fix=_FIX)
            self.root.mkdir(parents=True, exist_ok=True)
            with writer_lock(manifest_path, wait=True):
                if not manifest_path.exists():
                    write_json(manifest_path, {"format": FORMAT, "format_version": FORMAT_VERSION,
                                               "created": _now(), **dict(index or {})})
        self.manifest = read_json(manifest_path, what="registry manifest", fix=_FIX)
        if not isinstance(self.manifest, dict) or self.manifest.get("format") != FORMAT:
            raise DataError(f"not a registry manifest (format is not {FORMAT!r})",
                            path=manifest_path, fix=_FIX)
        if index:
            self.check_index(index)

    # -- reading ----------------------------------------------------------------------
    def versions(self) -> list[Version]:
        """Every complete version, oldest first (a half-written one is never listed)."""
        folder = self.root / "versions"
        if not folder.is_dir():
            return []
        names = [p.name for p in folder.iterdir()
                 if _NAME.fullmatch(p.name) and (p / "version.json").is_file()]
        promoted = self._promotions()
        return sorted((self._version(n, promoted) for n in names), key=lambda v: v.number)

    def _version(self, name: str, promoted: Mapping[str, Mapping[str, Any]]) -> Version:
        path = self.root / "versions" / name
        last = promoted.get(name, {})
        return Version(name, path, read_json(path / "version.json", what="version manifest"),
                       promoted_at=last.get("at"), promoted_by=last.get("by"))

    def _promotions(self) -> dict[str, dict[str, Any]]:
        """Each version's last promotion entry of the history."""
        return promotions(self.served_record().get("history", []))

    def survey(self) -> Survey:
        """What a status page shows, never failing on a broken file: every version (one
        whose ``version.json`` cannot be read is listed with ``broken`` set), the served
        version and history (none when ``served.json`` is corrupt) and one line per
        broken file in ``problems``."""
        problems: list[str] = []
        try:
            record = self.served_record()
        except (DataError, OSError) as exc:
            problems.append(" ".join(str(exc).split()))
            record = {"served": None, "history": []}
        history = [h for h in record.get("history", []) if isinstance(h, dict)]
        promoted = promotions(history)
        folder = self.root / "versions"
        names = sorted((p.name for p in folder.iterdir() if _NAME.fullmatch(p.name)
                        and (p / "version.json").is_file()),
                       key=version_number) if folder.is_dir() else []
        out = []
        for n in names:
            try:
                v = self._version(n, promoted)
                if not isinstance(v.manifest, Mapping):
                    raise DataError("corrupt version manifest (not an object)",
                                    path=v.path / "version.json")
                out.append(v)
            except (DataError, OSError) as exc:
                line = " ".join(str(exc).split())
                problems.append(line)
                last = promoted.get(n, {})
                out.append(Version(n, self.root / "versions" / n, {"version": n},
                                   promoted_at=last.get("at"), promoted_by=last.get("by"),
                                   broken=line))
        served = record.get("served")
        return Survey(out, served if isinstance(served, str) else None, history, problems)

    def get(self, name: str) -> Version:
        version_number(name)
        path = self.root / "versions" / name
        if not (path / "version.json").is_file():
            known = ", ".join(v.name for v in self.versions()) or "none yet"
            raise ConfigError(f"registry {self.root} has no version {name!r} (versions: "
                              f"{known})")
        return self._version(name, self._promotions())

    def served_record(self) -> dict[str, Any]:
        path = self.root / "served.json"
        if not path.exists():
            return {"served": None, "history": []}
        record = read_json(path, what="served-version record", fix=_FIX)
        if not isinstance(record, dict) or "served" not in record:
            raise DataError("corrupt served-version record", path=path, fix=_FIX)
        return record

    # -- writing ----------------------------------------------------------------------
    def register(self, state: AdaptState | None, **manifest: Any) -> Version:
        """Write a new version (the state and its manifest) whole, not promoted. ``state``
        None: a version that applies nothing (raw), kept for its evidence."""
        with writer_lock(self.root / "registry.json", wait=True):
            versions = self.versions()
            number = max((v.number for v in versions), default=0) + 1
            name = f"v{number}"
            record = {"version": name, "created": _now(), "applies": state is not None,
                      **manifest}
            with atomic_directory(self.root / "versions" / name) as tmp:
                if state is not None:
                    save_state(tmp / STATE_FILE, state)
                write_json(tmp / "version.json", record)
        return self.get(name)

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

    def _serve(self, name: str | None, action: str, by: str, reason: str) -> dict[str, Any]:
        path = self.root / "served.json"
        with writer_lock(path, wait=True):
            record = self.served_record()
            entry = {"action": action, "version": name, "from": record.get("served"),
                     "at": _now(), "time": time.time(), "by": by, "reason": reason}
            record = {"served": name, "history": [*record.get("history", []), entry]}
            write_json(path, record)
        return record

    # -- the candidate under an online test (candidate.json) --------------------------
    def candidate(self) -> dict[str, Any] | None:
        return read_candidate(self.root)

    def set_candidate(self, version: str, against: str | None,
                      by: str = "learner") -> dict[str, Any]:
        return set_candidate(self.root, version, against, by)

    def clear_candidate(self) -> None:
        clear_candidate(self.root)

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
            raise ConfigError(f"another learner runs on registry {self.root} "
                              f"({_holder(self.heartbeat())}): one learner per registry; "
                              "stop it first, or give another --registry") from None

    # -- following --------------------------------------------------------------------
    def mark(self, candidate: bool = False) -> tuple[Any, ...]:
        """What changes when the served version (and, with ``candidate``, the candidate)
        does: the record files' times and sizes."""
        try:
            st = os.stat(self.root / "served.json")
            served: tuple[int, int] = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            if not (self.root / "registry.json").is_file():
                raise DataError("the state registry is gone (no registry.json)",
                                path=self.root,
                                fix="mount or restore the registry folder") from None
            served = (0, 0)
        if not candidate:
            return served
        from tttembed.registry.candidate import CANDIDATE_FILE

        try:
            cs = os.stat(self.root / CANDIDATE_FILE)
            return (*served, cs.st_mtime_ns, cs.st_size)
        except FileNotFoundError:
            return (*served, 0, 0)

    def wait_change(self, timeout: float) -> None:
        """Wait for the next look (a folder has no notifications: ``timeout`` s)."""
        time.sleep(timeout)

    def remember_served(self, version: Version | None) -> None:
        """Nothing to keep: the folder itself is every replica's copy."""

    def cached_served(self) -> Version | None:
        return None

    def default_store(self) -> Store:
        from tttembed.loop.store import SQLiteStore

        return SQLiteStore(self.root / "loop.sqlite")

    @classmethod
    def files(cls, root: str | Path) -> Registry:
        """The folder's files without its manifest (the learner's record of a folder
        that may not be a registry yet)."""
        reg = cls.__new__(cls)
        reg.root, reg.location, reg.manifest = Path(root), str(root), {}
        return reg


def _now() -> str:
    return now_utc()


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


def _holder(hb: Mapping[str, Any] | None) -> str:
    if not hb:
        return "no heartbeat"
    age = time.time() - float(hb.get("time", 0) or 0)
    return f"pid {hb.get('pid')} on {hb.get('host')}, heartbeat {age:.1f} s ago"


def holder(hb: Mapping[str, Any] | None) -> str:
    """A learner's heartbeat in words (who holds the learner lock)."""
    return _holder(hb)


__all__ = ["DIFF_TOL", "FORMAT", "HEARTBEAT_FILE", "STATE_FILE", "STATUS_FILE", "Registry",
           "Survey", "Version", "holder", "index_record", "key_change", "read_status_file",
           "version_number"]
