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
    pins.json              the pinned versions, never dropped (written whole)

Retention (:mod:`tttembed.registry.retention`) drops a version by renaming its folder to
a hidden ``.vN.dropped-*`` name first (no reader ever lists half of it), then removing it.

Beside them the closed loop keeps its own files (the learner's record, heartbeat and
lock, the replicas' reports, the candidate: :mod:`tttembed.loop.coordination.folder`)
and, by default, its feedback store ``loop.sqlite``.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.adapt.state import AdaptState, save_state
from tttembed.core.errors import ConfigError, DataError, VersionInUse
from tttembed.core.io import (
    atomic_directory,
    move_aside,
    now_utc,
    read_json,
    remove_tree,
    write_json,
)
from tttembed.core.locks import writer_lock
from tttembed.registry.base import (
    FORMAT,
    FORMAT_VERSION,
    STATE_FILE,
    RegistryBase,
    Survey,
    Version,
    index_record,
    promotions,
    version_number,
)
from tttembed.registry.chain import FOLDER, write_files
from tttembed.registry.diff import DIFF_TOL, key_change

_NAME = re.compile(r"v(\d+)")
_FIX = ("give the folder `tttembed serve --learn --registry DIR` or `tttembed loop` made; "
        "for chain encoders, the folder `tttembed states add DIR CHECKPOINT` made (what "
        "`tttembed serve --chain DIR` serves): re-create a damaged one with `tttembed "
        "states add NEW_DIR CHECKPOINT`")


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
        out = []
        for n in names:
            try:
                out.append(self._version(n, promoted))
            except (DataError, OSError):
                if (folder / n / "version.json").is_file():
                    raise
                # dropped between the listing and the read: not a version any more
        return sorted(out, key=lambda v: v.number)

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
                if not (folder / n / "version.json").is_file():
                    continue  # dropped between the listing and the read
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
        return self._write(state, None, manifest)

    def register_files(self, files: Mapping[str, bytes], **manifest: Any) -> Version:
        """Write a new version of a chain encoder's files (kept under ``chain/``,
        :mod:`tttembed.registry.chain`) and its manifest, not promoted."""
        return self._write(None, files, manifest)

    def _write(self, state: AdaptState | None, files: Mapping[str, bytes] | None,
               manifest: Mapping[str, Any]) -> Version:
        with writer_lock(self.root / "registry.json", wait=True):
            versions = self.versions()
            number = max((v.number for v in versions), default=0) + 1
            name = f"v{number}"
            record = {"version": name, "created": _now(), "applies": state is not None,
                      **manifest}
            with atomic_directory(self.root / "versions" / name) as tmp:
                if state is not None:
                    save_state(tmp / STATE_FILE, state)
                if files is not None:
                    write_files(tmp / FOLDER, files)
                write_json(tmp / "version.json", record)
        return self.get(name)

    def _serve(self, name: str | None, action: str, by: str, reason: str) -> dict[str, Any]:
        path = self.root / "served.json"
        with writer_lock(path, wait=True):
            if name is not None and not (self.root / "versions" / name /
                                         "version.json").is_file():
                raise ConfigError(f"registry {self.root} has no version {name!r} any more "
                                  "(dropped meanwhile): `tttembed states list REGISTRY` "
                                  "lists what it holds")
            record = self.served_record()
            entry = {"action": action, "version": name, "from": record.get("served"),
                     "at": _now(), "time": time.time(), "by": by, "reason": reason}
            record = {"served": name, "history": [*record.get("history", []), entry]}
            write_json(path, record)
        return record

    # -- retention --------------------------------------------------------------------
    def version_bytes(self) -> dict[str, int]:
        """Each listed version's name -> the bytes of the files in its folder."""
        folder = self.root / "versions"
        if not folder.is_dir():
            return {}
        return {p.name: _bytes(p) for p in folder.iterdir()
                if _NAME.fullmatch(p.name) and (p / "version.json").is_file()}

    def drop(self, name: str) -> int:
        """Remove version ``name`` (under the writer lock, the served record's lock held
        too so that no promotion serves it meanwhile): its folder is renamed to a hidden
        name in one step, then removed. The bytes freed; 0 when it is gone already."""
        number = version_number(name)
        path = self.root / "versions" / name
        with writer_lock(self.root / "registry.json", wait=True), \
                writer_lock(self.root / "served.json", wait=True):
            newest = max((version_number(p.name) for p in path.parent.iterdir()
                          if _NAME.fullmatch(p.name)), default=0) \
                if path.parent.is_dir() else 0
            if not path.is_dir():
                if number > newest:
                    raise ConfigError(f"registry {self.root} has no version {name!r} "
                                      "(`tttembed states list REGISTRY` lists them)")
                return 0  # dropped before (by another process, or earlier)
            self._check_droppable(name, number, newest)
            freed = _bytes(path)
            move_aside(path)
        _remove_trash(path.parent)
        return freed

    def _check_droppable(self, name: str, number: int, newest: int) -> None:
        if self.served() == name:
            raise VersionInUse(f"{name} is served by registry {self.root}: serve another "
                               "version first (`tttembed states promote` or `rollback`)")
        if name in self.pins():
            raise VersionInUse(f"{name} is pinned in registry {self.root}: unpin it first "
                               f"(`tttembed states unpin {self.root} {name}`)")
        if number == newest:
            raise VersionInUse(f"{name} is the newest version of registry {self.root}: it "
                               "is kept (the next version would take its number again)")

    def pins(self) -> list[str]:
        path = self.root / PINS_FILE
        if not path.is_file():
            return []
        doc = read_json(path, what="pinned versions", fix=_PINS_FIX)
        names = doc.get("pins") if isinstance(doc, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DataError("corrupt pinned-versions record (no list of names under "
                            "\"pins\")", path=path, fix=_PINS_FIX)
        return sorted(set(names), key=version_number)

    def pin(self, name: str) -> bool:
        with writer_lock(self.root / "registry.json", wait=True):
            self.get(name)
            pins = self.pins()
            if name in pins:
                return False
            write_json(self.root / PINS_FILE, {"pins": sorted([*pins, name],
                                                              key=version_number)})
        return True

    def unpin(self, name: str) -> bool:
        version_number(name)
        with writer_lock(self.root / "registry.json", wait=True):
            pins = self.pins()
            if name not in pins:
                return False
            write_json(self.root / PINS_FILE, {"pins": [n for n in pins if n != name]})
        return True

    # -- following --------------------------------------------------------------------
    def mark(self) -> tuple[Any, ...]:
        """What changes when the served version does: the record file's time and size."""
        try:
            st = os.stat(self.root / "served.json")
            return (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            if not (self.root / "registry.json").is_file():
                raise DataError("the state registry is gone (no registry.json)",
                                path=self.root,
                                fix="mount or restore the registry folder") from None
            return (0, 0)

    def wait_change(self, timeout: float) -> None:
        """Wait for the next look (a folder has no notifications: ``timeout`` s)."""
        time.sleep(timeout)

    def remember_served(self, version: Version | None) -> None:
        """Nothing to keep: the folder itself is every replica's copy."""

    def cached_served(self) -> Version | None:
        return None


def _now() -> str:
    return now_utc()


PINS_FILE = "pins.json"
_PINS_FIX = "rewrite it as {\"pins\": [\"v1\", ...]} or remove it (no version pinned)"
_TRASH = re.compile(r"\.v\d+\.dropped-[0-9a-f]+")


def _bytes(folder: Path) -> int:
    """The bytes of the files under ``folder`` (0 for what vanished meanwhile)."""
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def _remove_trash(folder: Path) -> None:
    """Remove the hidden folders of dropped versions (this drop's, and any a killed
    drop left behind)."""
    for p in folder.iterdir():
        if _TRASH.fullmatch(p.name):
            remove_tree(p)


__all__ = ["DIFF_TOL", "FORMAT", "PINS_FILE", "STATE_FILE", "Registry", "Survey", "Version", "index_record",
           "key_change", "version_number"]
