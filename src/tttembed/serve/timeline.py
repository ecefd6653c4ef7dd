"""The dashboard's versions timeline (inline SVG): raw, then every version as a marker
(promoted: a green circle, refused: a red diamond, undecided: a hollow grey circle), the
served one ringed; each marker is ``<g data-marker="NAME" data-kind="promoted|refused|
unknown" data-served="true|false">`` (:mod:`tttembed.serve.dashboard`'s contract)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tttembed.serve.cells import esc


def version_rows(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rows = status.get("versions")
    if not isinstance(rows, (list, tuple)):
        return []
    return [row for row in rows if isinstance(row, Mapping)]


def is_served(row: Mapping[str, Any], served: Any) -> bool:
    flag = row.get("served")
    if isinstance(flag, bool):
        return flag
    return served is not None and row.get("version") == served


def marker_kind(row: Mapping[str, Any]) -> str:
    promoted = row.get("promoted")
    return "promoted" if promoted is True else ("refused" if promoted is False else "unknown")


def _shape(kind: str, x: float, y: float) -> str:
    """Promoted: a green circle; refused: a red diamond; unknown: a hollow grey circle."""
    if kind == "promoted":
        return f'<circle cx="{x}" cy="{y}" r="10" fill="#1a7f37"/>'
    if kind == "refused":
        pts = f"{x},{y - 11} {x + 11},{y} {x},{y + 11} {x - 11},{y}"
        return f'<polygon points="{pts}" fill="#c62828"/>'
    return f'<circle cx="{x}" cy="{y}" r="9" fill="#fff" stroke="#6b7785" stroke-width="2"/>'


def _marker(name: str, kind: str, served: bool, x: float, tip: str) -> str:
    y = 46
    ring = (f'<circle cx="{x}" cy="{y}" r="17" fill="none" stroke="#0b5cad" stroke-width="3"/>'
            f'<text x="{x}" y="{y - 24}" text-anchor="middle" font-size="11" font-weight="700"'
            ' fill="#0b5cad">served</text>') if served else ""
    label = name if len(name) <= 12 else name[:11] + "…"
    weight = ' font-weight="700"' if served else ""
    return (f'<g data-marker="{esc(name)}" data-kind="{kind}" '
            f'data-served="{"true" if served else "false"}"><title>{esc(tip)}</title>{ring}'
            f"{_shape(kind, x, y)}"
            f'<text x="{x}" y="{y + 32}" text-anchor="middle" font-size="12"{weight} '
            f'fill="#1f2933">{esc(label)}</text></g>')


def timeline(status: Mapping[str, Any]) -> str:
    rows, served = version_rows(status), status.get("version")
    step, pad = 96, 40
    width = max(2 * pad + step * len(rows), 240)
    last = pad + step * len(rows)
    parts = [f'<line x1="{pad}" y1="46" x2="{last}" y2="46" stroke="#c3cad3" stroke-width="2"/>',
             f'<g data-origin="raw"><title>raw vectors (no learned state)</title>'
             f'<rect x="{pad - 8}" y="38" width="16" height="16" rx="3" fill="#6b7785"/>'
             f'<text x="{pad}" y="78" text-anchor="middle" font-size="12" fill="#6b7785">raw'
             "</text></g>"]
    if served is None:
        parts.append(f'<circle cx="{pad}" cy="46" r="17" fill="none" stroke="#0b5cad" '
                     f'stroke-width="3"/><text x="{pad}" y="22" text-anchor="middle" '
                     'font-size="11" font-weight="700" fill="#0b5cad">served</text>')
    for i, row in enumerate(rows, 1):
        name, kind = str(row.get("version") or "?"), marker_kind(row)
        tip = f"{name}: {kind}" + (f" ({row.get('reason')})" if row.get("reason") else "")
        parts.append(_marker(name, kind, is_served(row, served), pad + step * i, tip))
    empty = "" if rows else '<p class="muted">No versions yet: raw vectors are served.</p>'
    return (f'<section><h2>Versions timeline</h2><div class="scroll"><svg role="img" '
            f'aria-label="versions timeline" width="{width}" height="92" '
            f'viewBox="0 0 {width} 92">{"".join(parts)}'
            f"</svg></div>{empty}{_legend()}</section>")


def _legend() -> str:
    def icon(shape: str) -> str:
        return (f'<svg width="22" height="22" viewBox="0 0 40 40">{shape}</svg>')

    ring = '<circle cx="20" cy="20" r="15" fill="none" stroke="#0b5cad" stroke-width="4"/>'
    return ('<div class="legend">'
            f'<span>{icon(_shape("promoted", 20, 20))}promoted</span>'
            f'<span>{icon(_shape("refused", 20, 20))}refused</span>'
            f"<span>{icon(ring)}served</span>"
            f'<span>{icon(_shape("unknown", 20, 20))}undecided</span></div>')


__all__ = ["is_served", "marker_kind", "timeline", "version_rows"]
