"""The state registry in PostgreSQL (``--registry postgresql://USER@HOST:PORT/DB``, the
``PG*`` variables read as psycopg reads them): replicas on several machines share nothing
but the database.

Tables (beside the feedback store's, in the same database by default):

    registry_manifest   the registry's manifest (format, index identity, corpus)
    registry_versions   one immutable row per version: number (v1, v2, ...), id (the
                        content address ``sha256:...`` of its manifest and state bytes, so a
                        retried write stores nothing twice), manifest, state file bytes,
                        parent, created
    registry_pointer    the served version and its generation; updated in one transaction
                        with a history row, then ``NOTIFY tttembed_registry`` (delivered
                        at commit). Its ``candidate`` column is the loop's (the version
                        under an online test, :mod:`tttembed.loop.coordination.postgres`)
    registry_history    every promotion and rollback
    registry_pins       the pinned versions (by number): retention never drops them

Retention (:mod:`tttembed.registry.retention`) deletes a version's row (the immutability
trigger refuses an UPDATE only) and this machine's cached copy of it.

Each process keeps a local read-only cache (``--registry-cache DIR``, default
``$TTTEMBED_CACHE_DIR/registry/<host-port-db>``) of the versions it read, each verified
against its id before use, and ``served.json``: the version it served last, so a replica
started while the database is down serves that (one line and exit when it has none).
The connection, its retries and the URL's masking are :mod:`tttembed.core.pg`'s.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tttembed.adapt.state import AdaptState, save_state
from tttembed.core.errors import ConfigError, DataError
from tttembed.core.faults import fault_point
from tttembed.core.io import now_utc
from tttembed.core.pg import Database, Dropped, Words, dead, reconnecting, retry
from tttembed.registry.base import (
    FORMAT,
    FORMAT_VERSION,
    STATE_FILE,
    RegistryBase,
    Survey,
    Version,
    promotions,
    version_number,
)
from tttembed.registry.cache import VersionCache, content_id, default_cache
from tttembed.registry.chain import pack
from tttembed.registry.pg_retention import PgRetention
from tttembed.registry.pg_schema import SCHEMA, WRITE_LOCK

log = logging.getLogger("tttembed.registry")
CHANNEL = "tttembed_registry"
#: Advisory locks: creating the schema, numbering a new version.
SCHEMA_LOCK = 0x7265_6769_7374_7279  # "registry"
CONNECT_TIMEOUT_S = 5
#: Tries (and the first pause, doubled each time) of a write the database dropped.
WRITE_TRIES, WRITE_PAUSE_S = 4, 0.5
_FIX = ("check that PostgreSQL runs there and that the host, port, user, password and "
        "database in the URL (or the PG* variables) are right")
WORDS = Words(invalid="registry {url} is not a valid PostgreSQL URL: {error} (write "
                      "postgresql://USER@HOST:PORT/DATABASE)",
              unreachable=f"cannot reach the registry {{url}}: {{error}} ({_FIX})",
              lost=f"lost the registry {{url}}: {{error}} ({_FIX})")

class RegistryUnavailable(ConfigError):
    """The registry's database cannot be reached (or dropped the connection)."""


class _Dropped(RegistryUnavailable, Dropped):
    """A connection opened earlier was found dropped (a restart): worth one more try."""


def is_url(spec: str | Path | None) -> bool:
    """Whether a registry spec names a backend by its URL scheme (``postgresql://...``;
    a plain path is a folder)."""
    return isinstance(spec, str) and bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]+://",
                                                   spec.strip()))


def from_spec(rest: str, **options: Any) -> PostgresRegistry:
    """``postgresql://...`` (or ``postgres://...``): ``rest`` is the spec after the scheme."""
    if not rest.startswith("//"):
        raise ConfigError(f"postgresql:{rest} is not a PostgreSQL URL; write "
                          "postgresql://USER@HOST:PORT/DATABASE")
    return PostgresRegistry("postgresql:" + rest, **options)


class PostgresRegistry(PgRetention, RegistryBase):
    """One index's state versions in the database at ``url``. ``offline_ok``: when the
    database cannot be reached but ``cache`` holds the registry's manifest, open
    anyway (``offline`` true: reads come from the cache until the database answers)."""

    def __init__(self, url: str, *, create: bool = False,
                 index: Mapping[str, Any] | None = None, cache: str | Path | None = None,
                 offline_ok: bool = False,
                 connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.db = Database(url.strip(), WORDS, timeout=connect_timeout,
                           unavailable=RegistryUnavailable, dropped=_Dropped)
        self.location = self.db.location
        self.cache = Path(cache) if cache else default_cache(self.db.dsn)
        self.copies = VersionCache(self.cache)
        self._listen: Any = None
        self._held: Any = None
        self.offline = False
        try:
            self.manifest = self._open(create, index)
        except RegistryUnavailable as exc:
            if not offline_ok:
                raise
            cached = self.copies.manifest()
            if cached is None:
                raise RegistryUnavailable(
                    f"{' '.join(str(exc).split())}; and this machine has no cached served "
                    f"version in {self.cache} to serve meanwhile: start it when the database "
                    "answers") from None
            self.manifest = cached
            self.offline = True
            log.warning("registry %s unreachable: serving from the cache %s until it "
                        "answers", self.location, self.cache)
        if index:
            self.check_index(index)

    # -- connections ----------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One transaction (committed on success); a dropped connection is opened anew
        on the next call and reported as :class:`RegistryUnavailable`."""
        with self.db.transaction() as cur:
            yield cur
        self.offline = False

    def _open(self, create: bool, index: Mapping[str, Any] | None) -> dict[str, Any]:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for sql in SCHEMA:
                cur.execute(sql)
            cur.execute("SELECT doc FROM registry_manifest WHERE key = 'registry'")
            row = cur.fetchone()
            if row is None:
                if not create:
                    raise DataError(f"registry {self.location} holds no registry yet",
                                    fix="start `tttembed serve --learn --registry URL` or "
                                        "`tttembed loop --registry URL` first")
                doc = {"format": FORMAT, "format_version": FORMAT_VERSION,
                       "created": now_utc(), **dict(index or {})}
                cur.execute("INSERT INTO registry_manifest (key, doc) VALUES ('registry', %s)",
                            (json.dumps(doc),))
            else:
                doc = _json(row[0], "registry manifest")
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise DataError(f"registry {self.location}: not a registry manifest (format is "
                            f"not {FORMAT!r})")
        self.copies.keep_manifest(doc)
        return doc

    def _retry(self, what: str, fn: Any) -> Any:
        """``fn()`` tried again (same arguments) while the database drops it: a write whose
        commit was lost is idempotent (content-addressed rows), so a retry is safe."""
        return retry(what, fn, RegistryUnavailable, log, tries=WRITE_TRIES,
                     pause=WRITE_PAUSE_S)

    # -- reading --------------------------------------------------------------------
    def versions(self) -> list[Version]:
        return [v for v in self.survey().versions if not v.broken]

    @reconnecting
    def survey(self) -> Survey:
        problems: list[str] = []
        with self._tx() as cur:
            cur.execute("SELECT number, id, manifest FROM registry_versions ORDER BY number")
            rows = cur.fetchall()
        record = self.served_record()
        promoted = promotions(record["history"])
        out = []
        for number, vid, text in rows:
            name = f"v{number}"
            last = promoted.get(name, {})
            try:
                manifest = _json(text, f"manifest of {name}")
                if not isinstance(manifest, dict):
                    raise DataError(f"registry {self.location}: the manifest of {name} is not "
                                    "an object")
                out.append(Version(name, self.copies.folder(vid), manifest, last.get("at"),
                                   last.get("by"), id=vid))
            except DataError as exc:
                line = " ".join(str(exc).split())
                problems.append(line)
                out.append(Version(name, self.copies.folder(vid), {"version": name},
                                   last.get("at"), last.get("by"), broken=line, id=vid))
        return Survey(out, record.get("served"), record["history"], problems)

    def get(self, name: str) -> Version:
        """The version ``name``, its files in the local cache (fetched once, checked
        against its id every time: bytes that do not match are refused)."""
        number = version_number(name)
        try:
            return self._get(number, name)
        except RegistryUnavailable:
            cached = self.copies.find(name)  # the database is down: the copy served before
            if cached is None:
                raise
            return cached

    @reconnecting
    def _get(self, number: int, name: str) -> Version:
        with self._tx() as cur:
            cur.execute("SELECT id, manifest FROM registry_versions WHERE number = %s",
                        (number,))
            row = cur.fetchone()
        if row is None:
            known = ", ".join(v.name for v in self.versions()) or "none yet"
            raise ConfigError(f"registry {self.location} has no version {name!r} "
                              f"(versions: {known})")
        vid, text = row
        folder = self.copies.folder(vid)
        if not self.copies.verified(vid):
            self._fetch(number, name)
        last = promotions(self.served_record()["history"]).get(name, {})
        return Version(name, folder, _json(text, f"manifest of {name}"), last.get("at"),
                       last.get("by"), id=vid)

    @reconnecting
    def _fetch(self, number: int, name: str) -> None:
        with self._tx() as cur:
            cur.execute("SELECT id, manifest, state, sidecar FROM registry_versions "
                        "WHERE number = %s", (number,))
            row = cur.fetchone()
        vid, text, state, sidecar = row
        manifest = _json(text, f"manifest of {name}")
        state = bytes(state) if state is not None else None
        sidecar = bytes(sidecar) if sidecar is not None else None
        if content_id(manifest, state, sidecar) != vid:
            raise DataError(f"registry {self.location}: the bytes of {name} do not match its "
                            f"id {vid} (a damaged row): refused",
                            fix="promote another version; re-register this one")
        self.copies.keep(vid, manifest, state, sidecar)

    @reconnecting
    def served_record(self) -> dict[str, Any]:
        with self._tx() as cur:
            cur.execute("SELECT served, generation FROM registry_pointer WHERE key = 'served'")
            row = cur.fetchone()
            cur.execute("SELECT entry FROM registry_history ORDER BY seq")
            history = [h for (text,) in cur.fetchall()
                       if isinstance(h := _json(text, "history entry", strict=False), dict)]
        served, generation = row if row else (None, 0)
        return {"served": served, "generation": int(generation), "history": history}

    @reconnecting
    def served(self) -> str | None:
        with self._tx() as cur:
            cur.execute("SELECT served FROM registry_pointer WHERE key = 'served'")
            row = cur.fetchone()
        return row[0] if row else None

    # -- writing --------------------------------------------------------------------
    def register_files(self, files: Mapping[str, bytes], **manifest: Any) -> Version:
        """Store a new version of a chain encoder's files (packed into the state column)
        and its manifest, as :meth:`register` stores a state."""
        record = {"created": now_utc(), "applies": False, **manifest}
        blob = pack(files)
        vid = content_id(record, blob, None)
        number = self._retry("registering a version",
                             lambda: self._insert(vid, record, blob, None))
        return self.get(f"v{number}")

    def register(self, state: AdaptState | None, **manifest: Any) -> Version:
        """Store a new version (its state bytes and manifest) in one row, not promoted;
        the same content again (a retried write) returns the version already stored."""
        record = {"created": now_utc(), "applies": state is not None, **manifest}
        blob = side = None
        if state is not None:
            with tempfile.TemporaryDirectory(prefix="tttembed-version-") as tmp:
                path = save_state(Path(tmp) / STATE_FILE, state)
                blob, side = path.read_bytes(), path.with_suffix(".json").read_bytes()
        vid = content_id(record, blob, side)
        number = self._retry("registering a version",
                             lambda: self._insert(vid, record, blob, side))
        return self.get(f"v{number}")

    @reconnecting
    def _insert(self, vid: str, record: dict[str, Any], blob: bytes | None,
                side: bytes | None) -> int:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            cur.execute("SELECT number FROM registry_versions WHERE id = %s", (vid,))
            row = cur.fetchone()
            if row is not None:
                return int(row[0])
            cur.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM registry_versions")
            number = int(cur.fetchone()[0])
            doc = {"version": f"v{number}", "id": vid, **record}
            cur.execute("INSERT INTO registry_versions (number, id, manifest, state, sidecar, "
                        "parent, created) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (number, vid, json.dumps(doc), blob, side,
                         record.get("parent"), record["created"]))
            fault_point("registry:insert")
        return number

    def _serve(self, name: str | None, action: str, by: str, reason: str) -> dict[str, Any]:
        """The pointer and a history row in one transaction, then NOTIFY (at commit)."""
        def write() -> None:
            with self._tx() as cur:
                cur.execute("SELECT served FROM registry_pointer WHERE key = 'served' "
                            "FOR UPDATE")
                row = cur.fetchone()
                if name is not None:  # dropped since it was looked up: never serve a gap
                    cur.execute("SELECT 1 FROM registry_versions WHERE number = %s",
                                (version_number(name),))
                    if cur.fetchone() is None:
                        raise ConfigError(f"registry {self.location} has no version {name!r} "
                                          "any more (dropped meanwhile): `tttembed states "
                                          "list REGISTRY` lists what it holds")
                entry = {"action": action, "version": name, "from": row[0] if row else None,
                         "at": now_utc(), "time": time.time(), "by": by, "reason": reason}
                cur.execute("INSERT INTO registry_history (entry) VALUES (%s)",
                            (json.dumps(entry),))
                cur.execute("UPDATE registry_pointer SET served = %s, "
                            "generation = generation + 1, updated = %s WHERE key = 'served'",
                            (name, time.time()))
                fault_point("registry:promote")
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "served"))

        self._retry("changing the served version", write)
        return self.served_record()

    # -- following ------------------------------------------------------------------
    @reconnecting
    def mark(self) -> tuple[Any, ...]:
        """The pointer's generation: what changes on a promotion."""
        with self._tx() as cur:
            cur.execute("SELECT generation FROM registry_pointer WHERE key = 'served'")
            row = cur.fetchone()
        return (int(row[0]) if row else 0,)

    def wait_change(self, timeout: float) -> None:
        """Return at the next notification of a change (``LISTEN``), or after ``timeout``
        s (the polling fallback: a connection that cannot listen just waits)."""
        deadline = time.monotonic() + timeout
        try:
            if self._listen is None or dead(self._listen):
                self._listen = self.db.connect(autocommit=True)
                self._listen.execute(f"LISTEN {CHANNEL}")
            for _ in self._listen.notifies(timeout=max(timeout, 0.01), stop_after=1):
                break
        except Exception:  # noqa: BLE001  (the watcher reports the error on its next look)
            with suppress(Exception):
                if self._listen is not None:
                    self._listen.close()
            self._listen = None
            left = deadline - time.monotonic()
            if left > 0:
                time.sleep(left)

    def remember_served(self, version: Version | None) -> None:
        """Keep in the cache which version this process serves (read at a start while the
        database is down)."""
        self.copies.remember(version)

    def cached_served(self) -> Version | None:
        return self.copies.served()

    def has_cached_served(self) -> bool:
        return self.copies.has_served()

    def close(self) -> None:
        with self.db.lock:
            self.db.close()
            if self._listen is not None:
                with suppress(Exception):
                    self._listen.close()
            self._listen = None


def _json(text: Any, what: str, *, strict: bool = True) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        if not strict:
            return None
        raise DataError(f"the registry's {what} is not JSON ({exc})") from None


__all__ = ["CHANNEL", "PostgresRegistry", "RegistryUnavailable", "from_spec", "is_url"]
