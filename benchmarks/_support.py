"""Helpers the benchmark scripts share (one home each; a script imports them as
``from _support import ...``, benchmarks/ being on ``sys.path`` when a script runs).

- :data:`ROOT` (the repository) and :data:`DATA` (``../shared/data``, the real tasks);
- :func:`free_port`, :func:`cli` (a ``tttembed`` command line in this Python),
  :func:`src_env` (an environment that imports this checkout's ``src``),
  :func:`wait_healthy` (a started server's ``/healthz``) and :func:`loopback_servers`
  (the loopback OpenAI / rerank server of ``tests/servers.py``);
- :func:`pct` (a percentile in ms), :func:`proc_status` (``/proc/PID/status`` fields:
  RSS, peak RSS) and :func:`write_json`;
- :func:`study_parser`: the options every study has (data root, output folder, tasks,
  cache, resamples).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str) -> list[str]:
    """The command line of ``tttembed ARGS`` run by this Python."""
    return [sys.executable, "-m", "tttembed", *args]


def src_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout's ``src`` first on PYTHONPATH (a
    child imports the code under test even where the package is not installed)."""
    env = {**os.environ, **extra}
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") \
        else src
    return env


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0,
                 log: Path | None = None) -> None:
    """Return once ``GET url/healthz`` answers 200; SystemExit when the process exits
    first (with the tail of ``log``) or after ``timeout`` seconds."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = f"; see {log}:\n{log_tail(log)}" if log is not None else ""
            raise SystemExit(f"the server at {url} exited ({proc.returncode}){tail}")
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server at {url} did not start within {timeout:.0f} s")


def start_serve(index: Path, args: Sequence[str], extra: Sequence[str] = ()
                ) -> tuple[subprocess.Popen, str]:
    """``tttembed serve --index INDEX ARGS EXTRA`` on a free port, quiet; (process, URL)
    once it is healthy (killed when it never is)."""
    port = free_port()
    cmd = cli("serve", "--index", str(index), *args, "--port", str(port),
              "--log-level", "warning", *extra)
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 180)
    except SystemExit:
        proc.kill()
        raise
    return proc, url


def stop(proc: subprocess.Popen, wait: float = 60.0) -> None:
    """SIGTERM ``proc``, SIGKILL it after ``wait`` seconds."""
    proc.terminate()
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def log_tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a log file ("" when unreadable)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def loopback_servers() -> ModuleType:
    """``tests/servers.py`` (``LocalOpenAIServer``: embeddings, chat and rerank routes on
    127.0.0.1), imported with the repository root on ``sys.path``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.servers

    return tests.servers


def pct(xs: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile of seconds, in milliseconds (NaN for no samples)."""
    return float(np.percentile(np.asarray(xs), q)) * 1000 if len(xs) else float("nan")


def proc_status(field: str, pid: int | str = "self") -> float:
    """A ``/proc/PID/status`` field in KiB (``VmRSS``: resident memory, ``VmHWM``: its
    peak so far); NaN where the process or the field is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return math.nan
    for line in lines:
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return math.nan


def write_json(path: Path | None, obj: Any) -> None:
    """``obj`` as indented JSON (paths and other objects as strings); nothing when
    ``path`` is None."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=str) + "\n")


def study_parser(doc: str, out: str, tasks: Sequence[str]) -> argparse.ArgumentParser:
    """A study's command line: ``--data-root`` (default ``../shared/data``), ``--out``
    (default ``out``), ``--tasks`` (comma-separated folder names under the data root, or
    BEIR folder paths; default ``tasks``), ``--cache-dir`` and ``--resamples``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--out", default=out)
    ap.add_argument("--tasks", default=",".join(tasks))
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--resamples", type=int, default=10000)
    return ap
