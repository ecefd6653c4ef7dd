"""Which registry versions to keep, and dropping the rest: the closed loop registers a
candidate every learning cycle (thousands a day), so a registry's storage stays bounded
only when old versions go.

:func:`kept` is the pure rule (a survey, the pins and a time in; each kept version and
why out); :func:`prune_versions` applies it to a registry (folder or database) through
the backends' ``drop``, which itself refuses the served, a pinned and the newest version.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from tttembed.core.errors import ConfigError, VersionInUse
from tttembed.registry.base import StateRegistry, Survey, Version, rollback_target

DAY_S = 86400.0


@dataclass(frozen=True)
class KeepRule:
    """What a registry keeps besides the served, pinned and broken versions: at most
    ``keep_versions`` others, chosen in this order: the newest, the one a rollback
    returns to, the version under an online test, the last promoted (by their last
    promotion), then the candidates refused within ``refused_window_s`` of now (newest
    first) as room remains. So a registry holds at most ``keep_versions`` + pinned +
    served (+ broken) versions however long the loop runs."""

    keep_versions: int = 20
    refused_window_s: float = 7 * DAY_S

    def __post_init__(self) -> None:
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int) \
                or self.keep_versions < MIN_KEEP:
            raise ConfigError(f"--keep-versions must be a whole number of at least {MIN_KEEP} "
                              f"(got {self.keep_versions!r}): the newest version and the one "
                              "a rollback returns to are always among those kept")
        window = self.refused_window_s
        if not isinstance(window, (int, float)) or isinstance(window, bool) \
                or not window >= 0:
            raise ConfigError(f"the window for refused candidates beside --keep-versions "
                              f"must be a number of seconds >= 0 (got {window!r})")


#: The fewest versions ``--keep-versions`` may keep: the newest and the rollback target.
MIN_KEEP = 2


def kept(survey: Survey, rule: KeepRule, pins: Collection[str], now: float, *,
         candidate: str | None = None) -> dict[str, str]:
    """The versions of ``survey`` to keep at time ``now`` (epoch seconds) -> why.
    Outside the count: ``served``; ``pinned`` (``pins``); ``broken: ...`` (never dropped
    automatically). Within ``rule.keep_versions``, in this order until it is full:
    ``newest`` (version numbers are the highest + 1: dropping it would give its number
    again; always kept), ``rollback target`` (what ``rollback()`` would serve now; always
    kept), ``candidate`` (the version under an online test, which the loop names),
    ``promoted`` (the last promoted, by their last promotion in the history), ``recent
    candidate`` (never promoted, registered within ``rule.refused_window_s`` of ``now``,
    newest first; one whose time cannot be read counts as recent). Every other version
    may go."""
    names = {v.name for v in survey.versions}
    out: dict[str, str] = {}
    room = [rule.keep_versions]

    def keep(name: str | None, reason: str, *, counted: bool = True) -> None:
        if name is None or name not in names or name in out:
            return
        if counted:
            if room[0] <= 0 and reason not in _ALWAYS:
                return
            room[0] -= 1
        out[name] = reason

    keep(survey.served, "served", counted=False)
    for name in pins:
        keep(name, "pinned", counted=False)
    for v in survey.versions:
        if v.broken:
            keep(v.name, f"broken: {v.broken}", counted=False)
    if survey.versions:
        keep(max(survey.versions, key=lambda v: v.number).name, "newest")
    keep(rollback_target(survey.history, survey.served), "rollback target")
    keep(candidate, "candidate")
    last: dict[str, int] = {}  # each version's last promotion: its place in the history
    for i, h in enumerate(survey.history):
        if isinstance(h, dict) and h.get("action") == "promote" and \
                isinstance(h.get("version"), str):
            last[h["version"]] = i
    for name in sorted((n for n in last if n in names), key=lambda n: last[n],
                       reverse=True):
        keep(name, "promoted")
    for v in sorted(survey.versions, key=lambda v: v.number, reverse=True):
        if v.name in last:
            continue
        created = created_time(v)
        if created is None:
            keep(v.name, "recent candidate (its creation time cannot be read)")
        elif now - created <= rule.refused_window_s:
            keep(v.name, "recent candidate")
    return out


#: Reasons kept even when ``keep_versions`` is full: the newest and the rollback target
#: (``keep_versions`` is at least two: they fit), and a version under an online test.
_ALWAYS = ("newest", "rollback target", "candidate")


def created_time(v: Version) -> float | None:
    """When version ``v`` was registered (its manifest's ``created``), in epoch seconds;
    None when the manifest has no time that parses."""
    text = v.manifest.get("created") if hasattr(v.manifest, "get") else None
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # now_utc() writes UTC
    return when.timestamp()


@dataclass(frozen=True)
class VersionPrune:
    """What :func:`prune_versions` dropped (or, ``dry_run``, would drop), what it kept
    and why, the bytes freed (or that would be) and the version counts around it."""

    dropped: tuple[str, ...]
    kept: dict[str, str] = field(default_factory=dict)
    bytes_freed: int = 0
    versions_before: int = 0
    versions_after: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dropped"] = list(self.dropped)
        return d


def prune_versions(registry: StateRegistry, rule: KeepRule, *, dry_run: bool = False,
                   now: float | None = None, candidate: str | None = None) -> VersionPrune:
    """Drop the versions of ``registry`` that :func:`kept` does not keep, oldest first.
    Right before each drop the served pointer is read again (a version promoted since the
    survey is kept, as ``served``), and the backend refuses a version served, pinned or
    newest at the moment of the drop (kept, with its reason); a version another process
    dropped first is not counted. ``dry_run``: nothing is dropped, the report says what
    would go and the bytes it would free. ``candidate``: the version under an online test
    (kept)."""
    now = time.time() if now is None else now
    survey = registry.survey()
    keep = kept(survey, rule, registry.pins(), now, candidate=candidate)
    sizes = registry.version_bytes()
    before = len(survey.versions)
    dropped: list[str] = []
    freed = 0
    for v in survey.versions:
        if v.name in keep:
            continue
        if dry_run:
            dropped.append(v.name)
            freed += sizes.get(v.name, 0)
            continue
        if registry.served() == v.name:  # promoted since the survey
            keep[v.name] = "served"
            continue
        try:
            got = registry.drop(v.name)
        except VersionInUse as exc:  # served or pinned since the survey
            keep[v.name] = " ".join(str(exc).split())
            continue
        if got > 0:
            dropped.append(v.name)
            freed += got
    after = before - len(dropped) if dry_run else len(registry.survey().versions)
    return VersionPrune(tuple(dropped), keep, freed, before, after, dry_run)


__all__ = ["DAY_S", "KeepRule", "VersionPrune", "created_time", "kept", "prune_versions"]
