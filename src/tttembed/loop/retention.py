"""How long the loop keeps what it logs: one frozen object (``--retain``,
``--keep-versions`` on ``serve`` and ``loop``), stated before a run and shown by
``GET /v1/loop`` and ``tttembed store stats``.

What retention removes, and what it never does (docs/guides/closed-loop.md, "Retention
and forgetting"):

- ``searches``, ``impressions``, ``interventions`` and ``events`` older than the window
  are deleted, in small batches, off the request path (:mod:`tttembed.loop.prune`);
  their counts live on in the store's running tallies (``/v1/loop``'s ``searches`` and
  ``events`` count every row ever logged) and in the ``pruned`` tallies;
- the judge's rewards (``rewards``: what the budget bought), the spend account, people's
  labels (``feedback``) and the click rewards (``click_rewards``: the aggregate the
  clicks older than the window survive as) are never pruned; ``tttembed store forget``
  removes one user's rows (:mod:`tttembed.loop.forget`);
- registry versions are kept by :class:`tttembed.registry.retention.KeepRule`.

A window shorter than the learner needs (the clicks' settle time plus the tail's
look-back, :func:`minimum_window`) is refused: the learner would lose searches before it
read their clicks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tttembed.core.errors import ConfigError

#: The default window: a week (docs/guides/closed-loop.md says why).
DEFAULT_RETAIN = "7d"
#: Registry versions kept by the "last K promoted" part of the rule, by default.
DEFAULT_KEEP_VERSIONS = 20
#: Rows one prune statement deletes at most (short transactions: no writer waits long).
BATCH = 2000
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
#: The words that turn retention off.
FOREVER = ("forever", "off", "none")


def parse_duration(text: str, option: str = "--retain") -> float:
    """``"30s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"1w"`` (a bare number: seconds) in
    seconds; ``"forever"``: infinity. A malformed duration is a one-line error."""
    raw = str(text).strip().lower()
    if raw in FOREVER:
        return math.inf
    m = _DURATION.fullmatch(raw)
    if m is None:
        raise ConfigError(f"{option} {text!r} is not a duration: write a number and a unit "
                          "(30s, 5m, 2h, 7d, 1w) or 'forever'")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise ConfigError(f"{option} {text!r} must be longer than 0 (or 'forever')")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest of :func:`parse_duration`'s spellings for ``seconds``."""
    if math.isinf(seconds):
        return "forever"
    for unit in ("d", "h", "m"):
        n = seconds / _UNITS[unit]
        if n >= 1 and float(n).is_integer():
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


def minimum_window(click_settle_s: float) -> float:
    """The shortest window the learner can live with: its searches are read
    ``click_settle_s`` after they are served, through a tail that re-reads the last
    :data:`~tttembed.loop.pending.LOOKBACK_S` seconds; twice that, so a learner one
    cycle late still finds them."""
    from tttembed.loop.pending import LOOKBACK_S

    return 2.0 * (float(click_settle_s) + LOOKBACK_S)


@dataclass(frozen=True)
class Retention:
    """``retain_s`` seconds of traffic kept (inf: everything); ``keep_versions`` registry
    versions kept besides the served and pinned ones
    (:class:`tttembed.registry.retention.KeepRule`); ``batch`` rows
    per delete; ``every_s`` seconds between prunes (None: a tenth of the window, from 5 s
    to 10 minutes)."""

    retain_s: float = 7 * 86400.0
    keep_versions: int = DEFAULT_KEEP_VERSIONS
    batch: int = BATCH
    every_s: float | None = None

    def __post_init__(self) -> None:
        if not self.retain_s > 0:
            raise ConfigError("--retain must be longer than 0 (or 'forever')")
        if self.keep_versions < 2:
            raise ConfigError(f"--keep-versions must be >= 2 (the newest version and the one "
                              f"a rollback returns to are among those kept; the served one "
                              f"besides), got {self.keep_versions}")
        if self.batch < 1:
            raise ConfigError("the prune batch must be >= 1 row")

    @classmethod
    def parse(cls, retain: str = DEFAULT_RETAIN,
              keep_versions: int = DEFAULT_KEEP_VERSIONS) -> Retention:
        return cls(parse_duration(retain), int(keep_versions))

    @property
    def enabled(self) -> bool:
        return not math.isinf(self.retain_s)

    @property
    def interval_s(self) -> float:
        if self.every_s is not None:
            return float(self.every_s)
        return min(max(self.retain_s / 10.0, 5.0), 600.0) if self.enabled else 600.0

    def check(self, click_settle_s: float) -> None:
        """Refuse a window the learner cannot live with (:func:`minimum_window`)."""
        floor = minimum_window(click_settle_s)
        if self.enabled and self.retain_s < floor:
            raise ConfigError(
                f"--retain {format_duration(self.retain_s)} is shorter than the learner "
                f"needs: searches are read {click_settle_s:g} s after they are served "
                f"(--click-settle-s), so keep at least {format_duration(floor)} "
                f"(or lower --click-settle-s)")

    def to_dict(self) -> dict[str, Any]:
        return {"retain": format_duration(self.retain_s),
                "retain_s": None if not self.enabled else self.retain_s,
                "keep_versions": self.keep_versions,
                "prune_every_s": round(self.interval_s, 3)}

    def argv(self) -> list[str]:
        return ["--retain", format_duration(self.retain_s),
                "--keep-versions", str(self.keep_versions)]


__all__ = ["BATCH", "DEFAULT_KEEP_VERSIONS", "DEFAULT_RETAIN", "FOREVER", "Retention",
           "format_duration", "minimum_window", "parse_duration"]
