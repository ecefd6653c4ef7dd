"""Running the app under uvicorn: one process (the app object, built before the socket
opens, so a bad index or state file fails the command at once), or ``workers`` processes
(each builds its own app from the config in :data:`~tttembed.serve.config.ENV`; the
state files are checked in this process first).

Signals: SIGINT/SIGTERM stop accepting, let in-flight requests finish (up to
``graceful_timeout_s``), then exit. SIGHUP re-reads the state files: in one process the
app swaps its snapshot (a broken file is refused, the old states kept, the error logged);
with several workers uvicorn replaces them one by one, and a worker that fails to load
leaves the old one serving (``POST /admin/reload`` checks the files in the worker that
gets it, then sends SIGHUP to uvicorn's parent process; generations count per worker
process, so a fresh worker starts again at 1).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from tttembed.core.errors import MissingDependency
from tttembed.serve.config import ENV, ServeConfig
from tttembed.serve.logs import configure_logging

#: Set in the environment of the learner ``serve --learn`` starts.
SERVED_LEARNER_ENV = "TTTEMBED_SERVED_LEARNER"

def _uvicorn():
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise MissingDependency("starlette/uvicorn", "serve") from None
    return uvicorn


def preflight(config: ServeConfig, learner: Any = None) -> None:
    """What ``serve`` checks before it binds the port (a one-line error, exit non-zero):
    starlette/uvicorn import, the store spec, and with ``--learn`` the learner's judge,
    audit and store specs (:func:`tttembed.loop.config.check_specs`)."""
    from tttembed.loop.config import check_specs, check_store

    _uvicorn()
    if learner is not None:
        check_specs(learner)
    elif config.loop.store:
        check_store(config.loop.store)


def check_serve_states(config: ServeConfig) -> None:
    """Load every state file and check it against the index (no model)."""
    from tttembed.adapt.state import load_state
    from tttembed.index.store import load_index
    from tttembed.serve.documents import Documents
    from tttembed.ttt.search import check_states as check

    index = load_index(config.index)
    check([load_state(p) for p in config.states], index,
          allow_foreign=config.allow_foreign_state)
    Documents(index, config.corpus).check()
    config.api_key()


def _die_with_parent() -> None:
    """In the learner child (Linux): SIGKILL when the server process ends, however it
    ends (uvicorn re-raises SIGTERM after its shutdown, so no ``finally`` of the server
    would run; a SIGKILL of the server runs nothing). SIGKILL, not SIGTERM: a niced
    learner on busy cores may not reach its Python handler for long, and every reward it
    was answered is committed already (what the kill -9 fault test checks)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def with_learner(config: ServeConfig, learner: Any, *, announce: str = "") -> None:
    """``serve --learn``: the learner (``python -m tttembed loop ...``, niced, one torch
    thread) runs as a child process beside the server and stops with it."""
    import subprocess
    import sys

    check_serve_states(config)
    # the server already warned about an unaudited judge: its learner child says it once
    env = {**os.environ, SERVED_LEARNER_ENV: "1"}
    child = subprocess.Popen([sys.executable, "-m", "tttembed", *learner.argv()], env=env,
                             preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    try:
        run(config, announce=announce)
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def _say(announce: str) -> None:
    if announce:
        import sys

        sys.stderr.write(announce + "\n")
        sys.stderr.flush()


def run(config: ServeConfig, *, announce: str = "") -> None:
    """Serve ``config``; ``announce`` is printed once the app is built, just before the
    port is bound (never before a check that can fail)."""
    uvicorn = _uvicorn()
    listen = config.listen
    configure_logging(listen.log_level)
    common = dict(host=listen.host, port=listen.port, log_level=listen.log_level,
                  access_log=False, timeout_graceful_shutdown=listen.graceful_timeout_s,
                  lifespan="on")
    if listen.workers == 1:
        from tttembed.serve.app import build_app

        app = build_app(config)
        _say(announce)
        uvicorn.run(app, **common)
        return
    check_serve_states(config)
    _say(announce)
    os.environ[ENV] = config.to_json()
    import inspect

    if "timeout_worker_healthcheck" in inspect.signature(uvicorn.Config).parameters:
        common["timeout_worker_healthcheck"] = 300  # a new worker loads the model first
    uvicorn.run("tttembed.serve.app:app_from_env", factory=True, workers=listen.workers,
                **common)
