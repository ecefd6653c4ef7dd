"""A registry of state versions on disk: what the closed loop registers and promotes and
what ``tttembed serve --registry DIR`` serves.

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

A version folder is immutable once written: whether and when a version was promoted is
read from ``served.json``'s history, the registry's own record, not from the version.
Promoting or rolling back rewrites only ``served.json`` (under the registry's writer
lock); a server polls it and swaps the new state in whole. Nothing here learns or
judges: :mod:`tttembed.loop` does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.adapt.state import AdaptState, load_state, save_state
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.core.io import atomic_directory, now_utc, read_json, write_json
from tttembed.core.locks import writer_lock

FORMAT = "tttembed-registry"
FORMAT_VERSION = 1
STATE_FILE = "vectors.npz"
#: Where serving replicas report what they serve, and how recent a report must be.
REPLICAS = "replicas"
REPLICA_FRESH_S = 30.0
_NAME = re.compile(r"v(\d+)")
_FIX = "give the folder `tttembed serve --learn --registry DIR` or `tttembed loop` made"


@dataclass(frozen=True)
class Version:
    """One registered version: its name (``v1``, ``v2``, ...), its folder and manifest
    (what was written once), and when it was last promoted (from the registry's history;
    None: never)."""

    name: str
    path: Path
    manifest: Mapping[str, Any] = field(repr=False)
    promoted_at: str | None = None
    promoted_by: str | None = None
    #: why the version's manifest could not be read ("" when it could; see Registry.survey)
    broken: str = ""

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
    """:meth:`Registry.survey`: versions, the served one, the history, broken files."""

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
                          "`tttembed states list DIR` lists them)")
    return int(m.group(1))


class Registry:
    """Versions of one index's states under ``root`` (created with ``create=True``)."""

    def __init__(self, root: str | Path, *, create: bool = False,
                 index: Mapping[str, Any] | None = None) -> None:
        self.root = Path(root)
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
    def check_index(self, index: Mapping[str, Any]) -> None:
        """Refuse a registry made for another index (embedder identity or corpus)."""
        for key in ("identity", "corpus_fingerprint"):
            mine, theirs = self.manifest.get(key), index.get(key)
            if mine and theirs and mine != theirs:
                raise StateMismatch(f"registry {self.root} holds states for {key} {mine!r}, "
                                    f"the index has {theirs!r}: give the index it was made "
                                    "for, or a new registry folder")

    def versions(self) -> list[Version]:
        """Every complete version, oldest first (a half-written one is never listed)."""
        folder = self.root / "versions"
        if not folder.is_dir():
            return []
        names = [p.name for p in folder.iterdir()
                 if _NAME.fullmatch(p.name) and (p / "version.json").is_file()]
        promotions = self._promotions()
        return sorted((self._version(n, promotions) for n in names), key=lambda v: v.number)

    def _version(self, name: str, promotions: Mapping[str, Mapping[str, Any]]) -> Version:
        path = self.root / "versions" / name
        last = promotions.get(name, {})
        return Version(name, path, read_json(path / "version.json", what="version manifest"),
                       promoted_at=last.get("at"), promoted_by=last.get("by"))

    def _promotions(self) -> dict[str, dict[str, Any]]:
        """Each version's last promotion entry of the history."""
        return {str(h.get("version")): h for h in self.served_record().get("history", [])
                if h.get("action") == "promote" and h.get("version")}

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
        promotions = {str(h.get("version")): h for h in history
                      if h.get("action") == "promote" and h.get("version")}
        folder = self.root / "versions"
        names = sorted((p.name for p in folder.iterdir() if _NAME.fullmatch(p.name)
                        and (p / "version.json").is_file()),
                       key=version_number) if folder.is_dir() else []
        out = []
        for n in names:
            try:
                v = self._version(n, promotions)
                if not isinstance(v.manifest, Mapping):
                    raise DataError("corrupt version manifest (not an object)",
                                    path=v.path / "version.json")
                out.append(v)
            except (DataError, OSError) as exc:
                line = " ".join(str(exc).split())
                problems.append(line)
                last = promotions.get(n, {})
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

    def served(self) -> str | None:
        """The version served now (None: raw vectors)."""
        return self.served_record().get("served")

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

    def promote(self, name: str, *, by: str = "user", reason: str = "",
                check: bool = False) -> dict[str, Any]:
        """Serve ``name`` from now on; returns the new served record. ``check``: first
        validate its state as the servers will (:meth:`validate`)."""
        v = self.get(name)
        if check:
            self.validate(v.name)
        return self._serve(v.name, "promote", by, reason)

    def validate(self, name: str) -> None:
        """Refuse (StateMismatch / DataError, one line) a version the servers would
        refuse: a state that does not load (NaN or inf values, a torn file) or was learned
        for another embedder or corpus than the registry's index (checked against the
        index itself when its folder is here, else against the index record)."""
        v = self.get(name)
        if not v.state_path.exists():
            return  # a version that applies nothing: raw
        try:
            st = v.load()
        except (DataError, ValueError, OSError) as exc:
            raise DataError(f"{name} cannot be served: {' '.join(str(exc).split())}",
                            path=v.state_path, fix="promote another version") from None
        index_path = self.manifest.get("index")
        if index_path and Path(str(index_path)).exists():
            from tttembed.index.store import load_index
            from tttembed.ttt.search import check_states

            try:
                check_states([st], load_index(str(index_path)))
            except StateMismatch as exc:
                raise StateMismatch(f"{name} cannot be served: {exc}") from None
            return
        for key, mine in (("identity", st.identity),
                          ("corpus_fingerprint", st.corpus_fingerprint)):
            theirs = self.manifest.get(key)
            if theirs and mine != theirs:
                raise StateMismatch(f"{name} cannot be served: its state has {key} {mine!r}, "
                                    f"the registry's index {theirs!r}; promote another "
                                    "version")

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

    def rollback(self, to: str | None = None, *, by: str = "user") -> dict[str, Any]:
        """Serve ``to``, or the version served before the current one (raw when none)."""
        record = self.served_record()
        if to is None:
            current = record.get("served")
            before = [h.get("from") for h in record["history"]
                      if h.get("action") == "promote" and h.get("version") == current]
            to = before[-1] if before else None  # what its promotion replaced
            if current is None:
                raise ConfigError(f"registry {self.root} serves raw vectors: nothing to roll "
                                  "back (give a version: `tttembed states rollback DIR v1`)")
        if to is not None:
            self.get(to)
        return self._serve(to, "rollback", by, "")

    def _serve(self, name: str | None, action: str, by: str, reason: str) -> dict[str, Any]:
        path = self.root / "served.json"
        with writer_lock(path, wait=True):
            record = self.served_record()
            entry = {"action": action, "version": name, "from": record.get("served"),
                     "at": _now(), "time": time.time(), "by": by, "reason": reason}
            record = {"served": name, "history": [*record.get("history", []), entry]}
            write_json(path, record)
        return record

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """What changes from version ``a`` to ``b``: keys added, removed, changed (whole
        vectors compared: per changed key the norm of ``alpha v`` 's difference, the
        cosine of the two vectors and both alphas, in ``changes``)."""
        sa, sb = _keys(self.get(a)), _keys(self.get(b))
        common = sorted(set(sa) & set(sb))
        changes = {k: c for k in common if (c := key_change(sa[k], sb[k])) is not None}
        return {"from": a, "to": b, "added": sorted(set(sb) - set(sa)),
                "removed": sorted(set(sa) - set(sb)), "changed": sorted(changes),
                "changes": changes, "unchanged": len(common) - len(changes)}


#: Differences below this (in norm, or in alpha) are float noise, not a change.
DIFF_TOL = 1e-6


def key_change(old: tuple[float, np.ndarray], new: tuple[float, np.ndarray]
               ) -> dict[str, float] | None:
    """How one key's (alpha, vector) changed, or None when it did not: the norm of the
    difference of the applied offsets ``alpha v``, the cosine of the vectors, both alphas."""
    (a0, v0), (a1, v1) = old, new
    if v0.shape != v1.shape:
        return {"delta_norm": float("inf"), "cosine": float("nan"), "alpha_from": a0,
                "alpha_to": a1}
    delta = float(np.linalg.norm(a1 * v1 - a0 * v0))
    if delta <= DIFF_TOL and abs(a1 - a0) <= DIFF_TOL and \
            float(np.linalg.norm(v1 - v0)) <= DIFF_TOL:
        return None
    n0, n1 = float(np.linalg.norm(v0)), float(np.linalg.norm(v1))
    cosine = float(v0 @ v1) / (n0 * n1) if n0 > 0 and n1 > 0 else float("nan")
    return {"delta_norm": round(delta, 6), "cosine": round(cosine, 6),
            "alpha_from": round(a0, 6), "alpha_to": round(a1, 6)}


def _keys(v: Version) -> dict[str, tuple[float, np.ndarray]]:
    if not v.state_path.exists():
        return {}
    st = v.load()
    vectors = [np.asarray(v, dtype=np.float64) for v in st.vectors]
    for j, i in enumerate(st.parts.adapter_rows.tolist()):  # an adapter's map is compared too
        vectors[i] = np.concatenate([vectors[i], st.parts.u[j].ravel(), st.parts.v[j].ravel()])
    return {k: (float(st.alpha[i]), vectors[i]) for i, k in enumerate(st.keys)}


def _now() -> str:
    return now_utc()


__all__ = ["FORMAT", "STATE_FILE", "Registry", "Survey", "Version", "index_record", "version_number"]
