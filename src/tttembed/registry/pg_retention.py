"""The PostgreSQL registry's part in retention (mixed into
:class:`tttembed.registry.postgres.PostgresRegistry`): each version's bytes, dropping a
version (its row, then this machine's cached copy) and the pinned versions
(``registry_pins``). The rule that chooses what to drop is
:mod:`tttembed.registry.retention`'s."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from tttembed.core.errors import ConfigError, VersionInUse
from tttembed.core.io import move_aside, now_utc
from tttembed.core.locks import writer_lock
from tttembed.core.pg import reconnecting
from tttembed.registry.base import version_number
from tttembed.registry.pg_schema import WRITE_LOCK


class PgRetention:
    """Needs the host's ``_tx``, ``_retry``, ``location`` and ``copies``."""

    if TYPE_CHECKING:
        location: str
        copies: Any

        def _tx(self) -> AbstractContextManager[Any]: ...
        def _retry(self, what: str, fn: Callable[[], Any]) -> Any: ...

    @reconnecting
    def version_bytes(self) -> dict[str, int]:
        """Each version's name -> the bytes of its state, sidecar and manifest."""
        with self._tx() as cur:
            cur.execute("SELECT number, COALESCE(octet_length(state), 0) + "
                        "COALESCE(octet_length(sidecar), 0) + octet_length(manifest) "
                        "FROM registry_versions ORDER BY number")
            return {f"v{n}": int(size) for n, size in cur.fetchall()}

    def drop(self, name: str) -> int:
        """Delete version ``name``'s row (checked in the same transaction, under the write
        lock and the served pointer's row lock: no promotion or new version meanwhile),
        then this machine's cached copy. The bytes freed; 0 when it is gone already."""
        number = version_number(name)

        def delete() -> tuple[int, str | None]:
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                cur.execute("SELECT served FROM registry_pointer WHERE key = 'served' "
                            "FOR UPDATE")
                row = cur.fetchone()
                served = row[0] if row else None
                cur.execute("SELECT COALESCE(MAX(number), 0) FROM registry_versions")
                newest = int(cur.fetchone()[0])
                cur.execute("SELECT id, COALESCE(octet_length(state), 0) + "
                            "COALESCE(octet_length(sidecar), 0) + octet_length(manifest) "
                            "FROM registry_versions WHERE number = %s", (number,))
                found = cur.fetchone()
                if found is None:
                    if number > newest:
                        raise ConfigError(f"registry {self.location} has no version {name!r} "
                                          "(`tttembed states list REGISTRY` lists them)")
                    return 0, None  # dropped before (by another process, or earlier)
                cur.execute("SELECT 1 FROM registry_pins WHERE number = %s", (number,))
                pinned = cur.fetchone() is not None
                _check_droppable(self.location, name, served == name, pinned,
                                 number == newest)
                cur.execute("DELETE FROM registry_versions WHERE number = %s", (number,))
                return int(found[1]), str(found[0])

        freed, vid = self._retry("dropping a version", delete)
        if vid is not None:
            self._forget(vid)
        return freed

    def _forget(self, vid: str) -> None:
        """Remove this machine's cached copy of a dropped version, if any (renamed to a
        hidden name first: no reader finds half of it)."""
        folder = self.copies.folder(vid)
        if not folder.is_dir():
            return
        with writer_lock(folder, wait=True):
            trash = move_aside(folder)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)

    @reconnecting
    def pins(self) -> list[str]:
        with self._tx() as cur:
            cur.execute("SELECT number FROM registry_pins ORDER BY number")
            return [f"v{n}" for (n,) in cur.fetchall()]

    def pin(self, name: str) -> bool:
        number = version_number(name)

        def insert() -> bool:
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                cur.execute("SELECT 1 FROM registry_versions WHERE number = %s", (number,))
                if cur.fetchone() is None:
                    raise ConfigError(f"registry {self.location} has no version {name!r} "
                                      "(`tttembed states list REGISTRY` lists them)")
                cur.execute("INSERT INTO registry_pins (number, pinned) VALUES (%s, %s) "
                            "ON CONFLICT (number) DO NOTHING", (number, now_utc()))
                return bool(cur.rowcount == 1)

        return bool(self._retry("pinning a version", insert))

    def unpin(self, name: str) -> bool:
        number = version_number(name)

        def delete() -> bool:
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                cur.execute("DELETE FROM registry_pins WHERE number = %s", (number,))
                return bool(cur.rowcount == 1)

        return bool(self._retry("unpinning a version", delete))


def _check_droppable(location: str, name: str, served: bool, pinned: bool,
                     newest: bool) -> None:
    if served:
        raise VersionInUse(f"{name} is served by registry {location}: serve another version "
                           "first (`tttembed states promote` or `rollback`)")
    if pinned:
        raise VersionInUse(f"{name} is pinned in registry {location}: unpin it first "
                           f"(`tttembed states unpin REGISTRY {name}`)")
    if newest:
        raise VersionInUse(f"{name} is the newest version of registry {location}: it is kept "
                           "(the next version would take its number again)")



__all__ = ["PgRetention"]
