"""The state registry's role: immutable versions, the served pointer and its history,
verify, promote, rollback and diff: what the closed loop registers and promotes, what
``tttembed serve --registry SPEC`` follows, and what ``tttembed states`` inspects. What
the learner and the replicas share besides (the learner's record and lock, the replicas'
reports, the candidate) is the loop's: :mod:`tttembed.loop.coordination`.

Two backends share this contract (:func:`tttembed.registry.open.open_registry` picks one
by its spec): a folder (:mod:`.versions`, one machine or a shared file system) and a
PostgreSQL database (:mod:`.postgres`, replicas on several machines sharing nothing but
the database). What is the same for both lives here: the version record, the survey a
status page reads, and the logic above the storage (promote, rollback, validate; diff in
:mod:`.diff`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tttembed.adapt.state import AdaptState, load_state
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.registry import chain
from tttembed.registry.chain import (
    FOLDER,
    check_fits,
    checkpoint_files,
    checkpoint_record,
    is_chain,
    is_checkpoint,
)
from tttembed.registry.diff import version_diff

FORMAT = "tttembed-registry"
FORMAT_VERSION = 1
STATE_FILE = "vectors.npz"
_NAME = re.compile(r"v(\d+)")


@dataclass(frozen=True)
class Version:
    """One registered version: its name (``v1``, ``v2``, ...), its folder (for a database
    registry: the local cache folder it is read from) and manifest (what was written
    once), and when it was last promoted (from the registry's history; None: never).
    ``id``: the content address of a database version (``sha256:...``; "" in a folder)."""

    name: str
    path: Path
    manifest: Mapping[str, Any] = field(repr=False)
    promoted_at: str | None = None
    promoted_by: str | None = None
    #: why the version's manifest could not be read ("" when it could; see survey)
    broken: str = ""
    id: str = ""

    @property
    def state_path(self) -> Path:
        return self.path / STATE_FILE

    @property
    def number(self) -> int:
        return int(self.name[1:])

    @property
    def promoted(self) -> bool:
        """Ever promoted (by the learner or by hand), by the registry's history."""
        return self.promoted_at is not None

    def load(self) -> AdaptState:
        return load_state(self.state_path)


@dataclass(frozen=True)
class Survey:
    """What a status page shows: versions, the served one, the history, broken parts."""

    versions: list[Version]
    served: str | None
    history: list[dict[str, Any]]
    problems: list[str]


def index_record(index: Any) -> dict[str, Any]:
    """What a registry records of the index it serves (and refuses another by)."""
    return {"identity": index.identity, "index": str(index.path),
            "corpus_fingerprint": str(index.manifest.get("corpus_fingerprint", ""))}


def version_number(name: str) -> int:
    m = _NAME.fullmatch(str(name).strip())
    if not m:
        raise ConfigError(f"not a version name: {name!r} (versions are v1, v2, ...; "
                          "`tttembed states list REGISTRY` lists them)")
    return int(m.group(1))


def promotions(history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each version's last promotion entry of a history."""
    return {str(h.get("version")): h for h in history
            if isinstance(h, dict) and h.get("action") == "promote" and h.get("version")}


def rollback_target(history: list[dict[str, Any]], current: str | None) -> str | None:
    """The version ``rollback()`` with no argument returns to while ``current`` is served:
    what ``current``'s last promotion replaced (None: raw vectors, or nothing served)."""
    if current is None:
        return None
    before = [h.get("from") for h in history
              if isinstance(h, dict) and h.get("action") == "promote"
              and h.get("version") == current]
    target = before[-1] if before else None
    return target if isinstance(target, str) else None


class StateRegistry(Protocol):
    """A registry of one index's state versions (folder or database)."""

    manifest: Mapping[str, Any]
    #: what messages name: the folder, or the database URL without its password
    location: str

    def versions(self) -> list[Version]: ...
    def survey(self) -> Survey: ...
    def get(self, name: str) -> Version: ...
    def served_record(self) -> dict[str, Any]: ...
    def served(self) -> str | None: ...
    def register(self, state: AdaptState | None, **manifest: Any) -> Version: ...
    def promote(self, name: str, *, by: str = "user", reason: str = "",
                check: bool = False) -> dict[str, Any]: ...
    def rollback(self, to: str | None = None, *, by: str = "user") -> dict[str, Any]: ...
    def validate(self, name: str) -> None: ...
    def add(self, path: str | Path, *, by: str = "user") -> Version: ...
    def add_chain(self, path: str | Path, *, by: str = "user") -> Version: ...
    def added_as(self, path: str | Path) -> Version | None: ...
    def diff(self, a: str, b: str) -> dict[str, Any]: ...
    def check_index(self, index: Mapping[str, Any]) -> None: ...
    # retention (:mod:`tttembed.registry.retention`)
    def drop(self, name: str) -> int: ...
    def version_bytes(self) -> dict[str, int]: ...
    def pins(self) -> list[str]: ...
    def pin(self, name: str) -> bool: ...
    def unpin(self, name: str) -> bool: ...
    # following the served pointer
    def mark(self) -> tuple[Any, ...]: ...
    def wait_change(self, timeout: float) -> None: ...
    def remember_served(self, version: Version | None) -> None: ...
    def cached_served(self) -> Version | None: ...
    def close(self) -> None: ...


class RegistryBase:
    """What both backends do the same way above their storage. A backend provides
    ``get``, ``served_record``, ``_serve``, ``register`` and ``location``/``manifest``."""

    manifest: Mapping[str, Any]
    location: str

    def get(self, name: str) -> Version:
        raise NotImplementedError

    def served_record(self) -> dict[str, Any]:
        raise NotImplementedError

    def _serve(self, name: str | None, action: str, by: str, reason: str) -> dict[str, Any]:
        raise NotImplementedError

    def register(self, state: AdaptState | None, **manifest: Any) -> Version:
        raise NotImplementedError

    def register_files(self, files: Mapping[str, bytes], **manifest: Any) -> Version:
        raise NotImplementedError

    def served(self) -> str | None:
        """The version served now (None: raw vectors)."""
        served = self.served_record().get("served")
        return served if isinstance(served, str) else None

    def check_index(self, index: Mapping[str, Any]) -> None:
        """Refuse a registry made for another index (embedder identity or corpus)."""
        for key in ("identity", "corpus_fingerprint"):
            mine, theirs = self.manifest.get(key), index.get(key)
            if mine and theirs and mine != theirs:
                raise StateMismatch(f"registry {self.location} holds states for {key} "
                                    f"{mine!r}, the index has {theirs!r}: give the index it "
                                    "was made for, or a new registry")

    def promote(self, name: str, *, by: str = "user", reason: str = "",
                check: bool = False) -> dict[str, Any]:
        """Serve ``name`` from now on; returns the new served record. ``check``: first
        validate its state as the servers will (:meth:`validate`)."""
        v = self.get(name)
        if check:
            self.validate(v.name)
        return self._serve(v.name, "promote", by, reason)

    def rollback(self, to: str | None = None, *, by: str = "user") -> dict[str, Any]:
        """Serve ``to``, or the version served before the current one (raw when none)."""
        record = self.served_record()
        if to is None:
            current = record.get("served")
            if current is None:
                raise ConfigError(f"registry {self.location} serves raw vectors: nothing to "
                                  "roll back (give a version: `tttembed states rollback "
                                  "REGISTRY v1`)")
            to = rollback_target(record.get("history", []), current)  # what it replaced
        if to is not None:
            self.get(to)
        return self._serve(to, "rollback", by, "")

    def validate(self, name: str) -> None:
        """Refuse (StateMismatch / DataError, one line) a version the servers would
        refuse: a state that does not load (NaN or inf values, a torn file) or was learned
        for another embedder or corpus than the registry's index (:meth:`check_state`)."""
        v = self.get(name)
        if is_chain(v.manifest):
            if not (v.path / FOLDER / "manifest.json").is_file():
                raise DataError(f"{name} cannot be served: its chain encoder files are "
                                "missing", path=v.path, fix="promote another version")
            check_fits(self.manifest, v.manifest, f"{name} cannot be served")
            return
        if not v.state_path.exists():
            return  # a version that applies nothing: raw
        try:
            st = v.load()
        except (DataError, ValueError, OSError) as exc:
            raise DataError(f"{name} cannot be served: {' '.join(str(exc).split())}",
                            path=v.state_path, fix="promote another version") from None
        self.check_state(st, f"{name} cannot be served", "promote another version")

    def check_state(self, st: AdaptState, what: str, fix: str) -> None:
        """Refuse (StateMismatch naming ``what``, ending with ``fix``) a state learned for
        another embedder or corpus than the registry's index: checked against the index
        itself when its folder is here, else against the index record."""
        index_path = self.manifest.get("index")
        if index_path and Path(str(index_path)).exists():
            from tttembed.index.store import load_index
            from tttembed.ttt.search import check_states

            try:
                check_states([st], load_index(str(index_path)), fix=fix)
            except StateMismatch as exc:
                raise StateMismatch(f"{what}: {exc}") from None
            return
        for key, mine in (("identity", st.identity),
                          ("corpus_fingerprint", st.corpus_fingerprint)):
            theirs = self.manifest.get(key)
            if theirs and mine != theirs:
                raise StateMismatch(f"{what}: its state has {key} {mine!r}, the registry's "
                                    f"index {theirs!r}; {fix}")

    def add(self, path: str | Path, *, by: str = "user") -> Version:
        """Register the state file ``path`` (what ``tttembed learn -o`` wrote) as a new
        version, not promoted, once it passes the checks of a served version
        (:meth:`check_state`); a registry that records no index to check against, or a
        state with no learned key, is refused. A chain encoder checkpoint (a folder) goes
        in a chain registry (:meth:`add_chain`)."""
        if is_checkpoint(path):
            return self.add_chain(path, by=by)
        st = load_state(path)
        what = f"{path} cannot be added to registry {self.location}"
        if not self.manifest.get("identity") and not self.manifest.get("index"):
            raise StateMismatch(f"{what}: the registry records no index to check it "
                                "against; add it to a registry made by `tttembed loop` or "
                                "`tttembed serve --learn`")
        self.check_state(st, what, "learn it on the registry's index, or add it to the "
                                   "registry of the index it was learned on")
        if not st.keys:
            raise DataError("the state holds no learned key (a dry run's plan?)", path=path,
                            fix="learn it without --dry-run")
        digest = state_digest(st)
        same = self.holding(digest)
        if same is not None:
            return same
        return self.register(st, parent=None, reason=f"added by {by} from {path}",
                             added_from=str(path), added_by=by, scope=st.scope,
                             pairs=dict(st.pairs), state_digest=digest)

    def added_as(self, path: str | Path) -> Version | None:
        """The version that already holds the state of file ``path`` (added before, from
        this path or another), or None: what ``add`` of the same state again returns
        instead of a new version, in a folder and a database registry alike."""
        if is_checkpoint(path):  # a chain encoder: the version holding the same files
            return chain.holding(self.versions(), chain.files_digest(checkpoint_files(path)))
        return self.holding(state_digest(load_state(path)))

    def holding(self, digest: str) -> Version | None:
        """The first version whose state has the content digest ``digest``."""
        for v in self.versions():
            if not v.broken and v.manifest.get("state_digest") == digest:
                return v
        return None

    def versions(self) -> list[Version]:
        raise NotImplementedError

    # -- retention: what a backend stores, :mod:`tttembed.registry.retention` decides --
    def drop(self, name: str) -> int:
        """Remove version ``name`` for good; the bytes it freed (0: already gone, another
        process dropped it first). The served, a pinned and the newest version are refused
        (:class:`VersionInUse`), a name never registered too (ConfigError)."""
        raise NotImplementedError

    def version_bytes(self) -> dict[str, int]:
        """Each stored version's name -> the bytes it holds."""
        raise NotImplementedError

    def pins(self) -> list[str]:
        """The pinned versions (never dropped), in number order."""
        raise NotImplementedError

    def pin(self, name: str) -> bool:
        """Pin version ``name`` (it must exist); False when it was pinned already."""
        raise NotImplementedError

    def unpin(self, name: str) -> bool:
        """Unpin ``name``; False when it was not pinned."""
        raise NotImplementedError

    def add_chain(self, path: str | Path, *, by: str = "user") -> Version:
        """Register the chain encoder checkpoint at ``path`` (its manifest and adapter) as
        a new version of this chain registry, not promoted; an encoder trained against
        another index or on another base model is refused with the reason."""
        record = checkpoint_record(path)
        check_fits(self.manifest, record,
                   f"{path} cannot be added to registry {self.location}")
        files = checkpoint_files(path)
        digest = chain.files_digest(files)
        same = chain.holding(self.versions(), digest)
        if same is not None:
            return same
        return self.register_files(files, parent=None,
                                   reason=f"chain encoder added by {by} from {path}",
                                   added_from=str(path), added_by=by, chain_digest=digest,
                                   **record)

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """What changes from version ``a`` to ``b``: keys added, removed, changed (per
        changed key, in ``changes``: the norm of ``alpha v`` 's difference, the cosine of
        the two vectors, both alphas and, where a side has an adapter map, ``map``:
        added, removed, changed or unchanged, with ``map_delta`` when both have one of one
        rank). What cannot be compared (a map on one side only, maps of two ranks,
        vectors of two dimensions) is said in ``not_compared``, never a number."""
        return version_diff(self.get(a), self.get(b), a, b)

    def __enter__(self) -> RegistryBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release what the registry holds open (nothing, for a folder)."""


def state_digest(state: AdaptState) -> str:
    """The content address of a state (its manifest less the time it was saved, keys and
    arrays; not the file's bytes, which hold the zip's times): the same state added twice
    is known again, whenever each copy was written."""
    h = hashlib.sha256(b"tttembed-state\0")
    manifest = {k: v for k, v in state.manifest().items() if k != "created"}
    h.update(json.dumps(manifest, sort_keys=True, default=str).encode())
    arrays = {"vectors": state.vectors, "alpha": state.alpha, "n_g": state.n_g,
              "keys": np.array(state.keys, dtype=str), **state.parts.arrays()}
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return "sha256:" + h.hexdigest()


def iter_names(names: Iterator[str]) -> list[str]:
    """Version names, in number order."""
    return sorted((n for n in names if _NAME.fullmatch(n)), key=version_number)


__all__ = ["FORMAT", "FORMAT_VERSION", "STATE_FILE",
           "RegistryBase", "StateRegistry", "Survey", "Version", "index_record",
           "iter_names", "promotions", "rollback_target", "version_number"]
