"""A real browser for the tests: Debian's headless chromium, run as a subprocess.

* :func:`chromium` finds ``/usr/bin/chromium`` (or ``chromium`` on ``PATH``); without one the
  calling test is skipped with the install command CI uses (:data:`INSTALL`).
* :func:`dump_dom` gives the DOM after load (scripts run, the page as the browser built
  it); :func:`screenshot` writes a PNG of the viewport.
* :func:`page_fields` / :func:`data_fields` / :func:`version_fields` / :func:`state_fields`
  read the dashboard's ``data-field`` values (``tttembed.serve.dashboard``: ``data-value``
  holds the exact value, strings as they are, the rest as JSON); :func:`expected_fields`
  says what they must be for a ``GET /v1/loop`` status, so a test can compare
  ``/dashboard`` against ``/v1/loop`` field by field.
* :func:`png_pixels` decodes a screenshot with Pillow (``PIL``).

Each run gets a fresh profile directory and the flags this closed-network, run-as-root
machine needs (:data:`FLAGS`); a run past its timeout is killed with its process group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

#: How CI gets the browser (Debian bookworm's package; about 155 MB of archives).
INSTALL = "apt-get install -y chromium"
#: Flags for every run: headless as root (no sandbox), no GPU, nothing on the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
#: Virtual time the page gets to settle (ms) before the dump or the screenshot.
VIRTUAL_TIME_MS = 2000


class BrowserError(RuntimeError):
    """Chromium failed, or ran past its timeout."""


def chromium_path() -> str | None:
    """``/usr/bin/chromium``, else ``chromium`` on ``PATH``, else None."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def chromium() -> str:
    """The chromium binary; skips the calling test when there is none."""
    path = chromium_path()
    if path is None:
        pytest.skip(f"chromium not found (/usr/bin/chromium or on PATH); CI installs it with "
                    f"`{INSTALL}`")
    return path


def run_chromium(args: list[str], *, timeout: float = 60.0) -> str:
    """Run headless chromium with :data:`FLAGS`, a fresh profile and ``args``; its stdout."""
    binary = chromium()
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this call started, no other
            proc.communicate()
            raise BrowserError(f"chromium ran past {timeout:g}s: {' '.join(cmd)}") from None
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited {proc.returncode}: {' '.join(cmd)}\n{err[-2000:]}")
    return out


def dump_dom(url: str, *, timeout: float = 60.0) -> str:
    """The serialized DOM of ``url`` once loaded (``--dump-dom``)."""
    return run_chromium([f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--dump-dom", url],
                        timeout=timeout)


def screenshot(url: str, png_path: str | os.PathLike[str], width: int = 1200, height: int = 900,
               *, timeout: float = 60.0) -> Path:
    """A ``width`` x ``height`` PNG of ``url``'s viewport at ``png_path``."""
    path = Path(png_path).resolve()
    path.unlink(missing_ok=True)
    run_chromium([f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--hide-scrollbars",
                  f"--window-size={width},{height}", f"--screenshot={path}", url],
                 timeout=timeout)
    if not path.is_file():
        raise BrowserError(f"chromium wrote no screenshot at {path}")
    return path


def png_pixels(png_path: str | os.PathLike[str]) -> tuple[tuple[int, int], list[tuple[int, ...]]]:
    """``((width, height), RGB pixels)`` of a PNG, decoded with Pillow."""
    image_mod = pytest.importorskip("PIL.Image", reason="Pillow decodes the screenshots")
    with image_mod.open(png_path) as image:
        rgb = image.convert("RGB")
        return rgb.size, list(rgb.getdata())


# --- the dashboard's data-field values ------------------------------------------------

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}


@dataclass
class PageFields:
    """The ``data-field`` values of a page: loop-wide (``top``), per ``data-version`` row,
    per ``data-state`` row; and the timeline markers' attributes, in page order."""

    top: dict[str, str] = field(default_factory=dict)
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    markers: list[dict[str, str]] = field(default_factory=list)


class _FieldParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = PageFields()
        self.stack: list[tuple[str, dict[str, str]]] = []  # (tag, attrs) of open elements
        self.texts: list[tuple[int, str, list[str]]] = []  # fields waiting for their text

    def _scope(self) -> dict[str, str]:
        for _, attrs in reversed(self.stack):
            if "data-version" in attrs:
                return self.out.versions.setdefault(attrs["data-version"], {})
            if "data-state" in attrs:
                return self.out.states.setdefault(attrs["data-state"], {})
        return self.out.top

    def _put(self, name: str, value: str) -> None:
        scope = self._scope()
        if name in scope:
            raise ValueError(f"data-field {name!r} twice in one scope: {scope[name]!r}, {value!r}")
        scope[name] = value

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = {k: v or "" for k, v in attrs}
        if "data-marker" in got:
            self.out.markers.append(got)
        if tag in _VOID:
            if "data-field" in got:
                self._put(got["data-field"], got.get("data-value", ""))
            return
        self.stack.append((tag, got))
        if "data-field" in got:
            if "data-value" in got:
                self._put(got["data-field"], got["data-value"])
            else:
                self.texts.append((len(self.stack), got["data-field"], []))

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            depth = len(self.stack)
            if self.texts and self.texts[-1][0] == depth:
                _, name, parts = self.texts.pop()
                self._put(name, "".join(parts).strip())
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, _, parts in self.texts:
            parts.append(data)


def page_fields(html: str) -> PageFields:
    """Every ``data-field`` of ``html``: its ``data-value`` if present, else its text."""
    parser = _FieldParser()
    parser.feed(html)
    parser.close()
    return parser.out


def data_fields(html: str) -> dict[str, str]:
    """The loop-wide fields (those outside any version or state row)."""
    return page_fields(html).top


def version_fields(html: str) -> dict[str, dict[str, str]]:
    """``{version: {field: value}}`` from the ``<tr data-version>`` rows."""
    return page_fields(html).versions


def state_fields(html: str) -> dict[str, dict[str, str]]:
    """``{state: {field: value}}`` from the ``<tr data-state>`` rows (``raw`` included)."""
    return page_fields(html).states


def exact(value: Any) -> str:
    """A status value as ``data-value`` holds it: strings unchanged, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def expected_fields(status: Mapping[str, Any]) -> PageFields:
    """What :func:`page_fields` must read on the dashboard of ``status`` (``GET /v1/loop``)."""
    from tttembed.serve.dashboard import EVIDENCE_FIELDS, PAIR_FIELDS, TOP_FIELDS

    out = PageFields(top={name: exact(status.get(name)) for name in TOP_FIELDS})
    for row in status.get("versions") or []:
        got = {name: exact(row.get(name)) for name in
               ("created", "parent", "promoted", "served", "reason", "queries_served")}
        pairs = row.get("pairs") or {}
        got.update({f"pairs_{name}": exact(pairs.get(name)) for name in PAIR_FIELDS})
        evidence = row.get("evidence")
        if evidence is None:
            got["evidence"] = "null"
        else:
            got.update({name: exact(evidence.get(name)) for name in EVIDENCE_FIELDS})
        out.versions[str(row.get("version") or "?")] = got
    for state, count in (status.get("queries_served") or {}).items():
        out.states[str(state)] = {"queries_served": exact(count)}
    return out
