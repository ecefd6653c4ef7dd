"""Fault-injection suite: real processes, SIGKILL at named points, concurrent writers,
reader loops, corrupt files, a small tmpfs.

Each test's docstring states the expected behaviour; ``benchmarks/fault_matrix.py`` runs
the suite and prints one row per test (case, expected, observed, OK/FAIL). Helpers:

- :func:`run_py`: run Python code in a fresh process (repo root on ``sys.path``), with
  ``TTTEMBED_FAULT`` set to a named fault point (:func:`tttembed.core.faults.fault_point`);
- :func:`killed`: whether a finished process died of SIGKILL;
- fixture ``tmpfs``: a 2 MiB tmpfs mount (skipped with the reason where mounting fails).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    """Attach each fault test's docstring (first paragraph) as its expected behaviour, so
    that the junit XML the matrix reads carries it."""
    for item in items:
        if "tests/faults" not in str(item.fspath).replace(os.sep, "/"):
            continue
        doc = (getattr(item, "function", None).__doc__ or "").strip()
        first = " ".join(doc.split("\n\n")[0].split())
        item.user_properties.append(("expected", first or item.name))


def env(fault: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process: this one's, repo root first on PYTHONPATH,
    offline, one thread, and ``TTTEMBED_FAULT`` when ``fault`` is given."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"),
                                         out.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out.pop("TTTEMBED_FAULT", None)
    if fault:
        out["TTTEMBED_FAULT"] = fault
    out.update(extra)
    return out


def run_py(code: str, *, fault: str | None = None, timeout: float = 180,
           **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``python -c`` in a fresh process; its completed process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env(fault, **extra), timeout=timeout)


def run_cli(*args: str, fault: str | None = None, timeout: float = 300,
            **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``tttembed ARGS`` (the console script's entry point) in a fresh process."""
    return subprocess.run([sys.executable, "-c", "from tttembed.cli import main; main()",
                           *args], capture_output=True,
                          text=True, cwd=ROOT, env=env(fault, **extra), timeout=timeout)


def killed(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode == -signal.SIGKILL


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The error output of a failed CLI run, asserting it is one line and no traceback."""
    text = (proc.stderr + proc.stdout).strip()
    assert proc.returncode == 1, (proc.returncode, text)
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only); skipped with the reason where it cannot be mounted."""
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs here ({res.stderr.strip() or res.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
