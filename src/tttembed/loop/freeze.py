"""Freezing and thawing promotions from drift audits (:mod:`tttembed.loop.drift`: the
judge against its own past rewards, against people's audit set, against the clicks): a
failed audit freezes and distrusts the rewards judged (and the click rewards estimated)
since the last audit that passed;
a passing one thaws; an audit that measured nothing is recorded with ``passed: None``
and changes nothing; a person's promotion after the freeze thaws too."""

from __future__ import annotations

import logging
import time

from tttembed.core.io import now_utc
from tttembed.loop.drift import DriftCheck
from tttembed.loop.status import LoopState
from tttembed.loop.store import Store
from tttembed.registry.base import StateRegistry

log = logging.getLogger("tttembed.loop")
#: Audits kept in the status.
AUDITS_KEPT = 10


def apply_audit(state: LoopState, audit: DriftCheck, store: Store) -> None:
    """Record ``audit`` in ``state`` and freeze or thaw (module docstring)."""
    s, now = state, time.time()
    s.audited_at = now
    entry = {**audit.as_dict(), "at": now_utc()}
    s.audits = [*s.audits[-(AUDITS_KEPT - 1):], {**entry, "passed": None} if audit.blank
                else entry]
    if audit.blank:
        if s.frozen and "no judge budget left" not in s.reason:
            s.reason += " (no judge budget left to audit again)"
        return
    if not audit.passed:
        if not s.frozen:
            distrusted = store.distrust(s.last_ok_audit)
            log.warning("promotions frozen: %s (%d rewards since the last passing audit "
                        "distrusted)", audit.reason, distrusted)
            s.frozen_at = now
        s.frozen, s.reason = True, audit.reason
        return
    s.last_ok_audit = now
    if s.frozen:
        log.info("promotions resume: the judge agrees again")
    s.frozen, s.reason = False, ""


def thawed_by_user(state: LoopState, registry: StateRegistry) -> bool:
    """Did a person promote a version since promotions froze?"""
    history = registry.served_record().get("history", [])
    return any(h.get("by") == "user" and h.get("action") == "promote"
               and float(h.get("time", 0)) > state.frozen_at for h in history)


__all__ = ["AUDITS_KEPT", "apply_audit", "thawed_by_user"]
