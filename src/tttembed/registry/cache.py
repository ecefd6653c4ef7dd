"""A database registry's local copy on one machine (``--registry-cache DIR``): the
versions this process read, each checked against its content address on every read, the
registry's manifest, and ``served.json``, the version it served last (what a replica
started while the database is down serves).

    DIR/registry.json            the registry's manifest, as the database holds it
    DIR/versions/<sha256>/       one read-only copy per version: vectors.npz, vectors.json,
                                 version.json (written whole, under a writer lock)
    DIR/served.json              {"served": name, "id": "sha256:...", "time": ...}
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tttembed.core.errors import DataError
from tttembed.core.io import atomic_directory, read_json, write_json
from tttembed.core.locks import writer_lock
from tttembed.registry.base import STATE_FILE, Version
from tttembed.registry.chain import FOLDER, PACKED, is_chain, unpack, write_files

SIDECAR = "vectors.json"


def content_id(manifest: Mapping[str, Any], state: bytes | None, sidecar: bytes | None) -> str:
    """A version's content address: sha256 of its manifest (without the name, id and
    time the registry gives it) and its state file bytes."""
    body = {k: v for k, v in manifest.items() if k not in ("version", "id", "created")}
    h = hashlib.sha256(b"tttembed-version\0")
    for part in (json.dumps(body, sort_keys=True, default=str).encode(), state or b"",
                 sidecar or b""):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return "sha256:" + h.hexdigest()


def default_cache(url: str) -> Path:
    """``$TTTEMBED_CACHE_DIR/registry/<hash of the URL without its password>``."""
    from tttembed.core.paths import cache_dir
    from tttembed.core.pg import mask_url

    tag = hashlib.sha256(mask_url(url).encode()).hexdigest()[:16]
    return cache_dir() / "registry" / tag


class VersionCache:
    """The verified local copies under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, vid: str) -> Path:
        return self.root / "versions" / vid.removeprefix("sha256:")

    def verified(self, vid: str) -> bool:
        """Whether the copy of ``vid`` is there and still matches its id."""
        folder = self.folder(vid)
        try:
            manifest = read_json(folder / "version.json", what="cached version")
        except (DataError, OSError):
            return False
        if not isinstance(manifest, dict):
            return False
        state = folder / (PACKED if is_chain(manifest) else STATE_FILE)
        sidecar = folder / SIDECAR
        return content_id(
            manifest, state.read_bytes() if state.exists() else None,
            sidecar.read_bytes() if sidecar.exists() else None) == vid

    def keep(self, vid: str, manifest: Mapping[str, Any], state: bytes | None,
             sidecar: bytes | None) -> None:
        """Write the copy of ``vid`` (bytes already checked against it), read-only; another
        process of this cache writing it at the same time is waited for."""
        folder = self.folder(vid)
        with writer_lock(folder, wait=True):
            if self.verified(vid):
                return
            with atomic_directory(folder) as tmp:
                if state is not None and is_chain(manifest):  # a chain encoder's files
                    (tmp / PACKED).write_bytes(state)
                    write_files(tmp / FOLDER, unpack(state))
                elif state is not None:
                    (tmp / STATE_FILE).write_bytes(state)
                if sidecar is not None:
                    (tmp / SIDECAR).write_bytes(sidecar)
                write_json(tmp / "version.json", manifest)
                for path in tmp.iterdir():
                    if path.is_file():
                        path.chmod(0o444)  # a copy, checked on every read

    def find(self, name: str) -> Version | None:
        """The verified copy of version ``name``, or None."""
        root = self.root / "versions"
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            try:
                manifest = read_json(folder / "version.json", what="cached version")
            except (DataError, OSError):
                continue
            vid = "sha256:" + folder.name
            if isinstance(manifest, dict) and manifest.get("version") == name and \
                    self.verified(vid):
                return Version(name, folder, manifest, id=vid)
        return None

    # -- the registry's manifest ------------------------------------------------------
    def keep_manifest(self, doc: Mapping[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json(self.root / "registry.json", dict(doc))

    def manifest(self) -> Any:
        """The cached registry manifest, or None when there is none."""
        path = self.root / "registry.json"
        return read_json(path, what="cached registry manifest") if path.is_file() else None

    # -- the version served last ------------------------------------------------------
    def remember(self, version: Version | None) -> None:
        record = {"served": version.name if version else None,
                  "id": version.id if version else None, "time": time.time()}
        write_json(self.root / "served.json", record, sync=False)

    def has_served(self) -> bool:
        return (self.root / "served.json").is_file()

    def served(self) -> Version | None:
        """The version served last, verified (None: raw, or nothing remembered). Raises
        DataError when its copy is damaged."""
        path = self.root / "served.json"
        if not path.is_file():
            return None
        record = read_json(path, what="cached served version")
        vid = record.get("id") if isinstance(record, dict) else None
        if not vid:
            return None
        folder = self.folder(str(vid))
        if not self.verified(str(vid)):
            raise DataError("the cached served version does not match its id", path=folder,
                            fix="start the replica when the database answers")
        manifest = read_json(folder / "version.json", what="cached version")
        return Version(str(record.get("served")), folder, manifest, id=str(vid))


__all__ = ["SIDECAR", "VersionCache", "content_id", "default_cache"]
