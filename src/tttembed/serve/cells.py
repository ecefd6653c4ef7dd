"""How one status value becomes HTML on the dashboard (:mod:`tttembed.serve.dashboard`):
the machine-readable contract (``data-field="NAME"`` and ``data-value="EXACT"``: strings as
they are; numbers, booleans and null as JSON), the text a person reads, escaping.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from typing import Any


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def exact(value: Any) -> str:
    """The value as a reader gets it back: strings unchanged, everything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def real(value: Any) -> float | None:
    """``value`` as a finite float, or None for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def plain(value: Any) -> str:
    """The escaped text a person reads for a value with no special format."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return esc(value)


def data_field(name: str, value: Any, text: str | None = None, cls: str = "",
           tag: str = "span") -> str:
    """``<span data-field=name data-value=exact>text</span>``; ``text`` is trusted HTML."""
    klass = f' class="{cls}"' if cls else ""
    shown = plain(value) if text is None else text
    return (f'<{tag} data-field="{esc(name)}" data-value="{esc(exact(value))}"{klass}>'
            f"{shown}</{tag}>")


def signed(value: Any) -> str:
    number = real(value)
    return "—" if number is None else f"{number:+.3f}"


def pvalue(value: Any) -> str:
    number = real(value)
    if number is None:
        return "—"
    return f"{number:.3f}" if number >= 0.001 else f"{number:.1e}"


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


__all__ = ["as_map", "data_field", "esc", "exact", "plain", "pvalue", "real", "signed"]


def interval_note(evidence: Mapping[str, Any]) -> str:
    """Why a version's evidence has no interval, in words that agree with its counts: no
    changed query judged (however many unchanged ones there are), or fewer than 2."""
    changed, left_out = evidence.get("changed"), evidence.get("left_out") or 0
    if changed == 0 and left_out:
        return (f"(no interval: none of the {plain(left_out)} queries whose top-10 changes "
                "was judged)")
    if changed == 0:
        return "(no interval: no query's top-10 changes)"
    return "(no interval with fewer than 2 queries)"

