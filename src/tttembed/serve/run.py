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

import logging
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


def die_with_server() -> None:
    """In the learner ``serve --learn`` started (its environment names the server's pid):
    end when the server process ends, however it ends, and never write after it. On
    Linux the kernel sends SIGKILL at the server's death (PR_SET_PDEATHSIG, set here in
    the child rather than in a ``preexec_fn``, which is unsafe beside threads); a server
    already gone by then (it died while this process started) ends it at once; elsewhere,
    or where prctl fails, a watcher thread polls the parent pid. SIGKILL, not SIGTERM: a
    niced learner on busy cores may not reach its Python handler for long, and every
    reward it was answered is committed already (what the kill -9 fault test checks)."""
    import sys
    import threading
    import time

    server = os.environ.get(SERVED_LEARNER_ENV, "")
    if not server.isdigit():
        return
    parent = int(server)
    if sys.platform == "linux":
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            armed = libc.prctl(1, signal.SIGKILL) == 0  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
        if os.getppid() != parent:  # the server died before the signal was armed
            _orphaned(parent)
        if armed:
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        _orphaned(parent)

    threading.Thread(target=watch, name="server-watch", daemon=True).start()


def _orphaned(parent: int) -> None:
    """The server is gone: say so and end now (no cleanup that could write)."""
    import sys

    sys.stderr.write(f"tttembed loop: its server (pid {parent}) is gone; the learner "
                     "stops with it\n")
    sys.stderr.flush()
    os._exit(1)


class _Terminated(Exception):
    """SIGTERM reached ``serve --learn`` (after uvicorn's graceful shutdown)."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated(signum)


def chain_to_learn(config: ServeConfig, learner: Any) -> tuple[str | None, str]:
    """The chain registry ``serve --learn`` also learns chain versions into (its
    ``--chain`` when that names a chain registry followed unpinned, and the judge pays:
    None otherwise) and, when ``--chain`` is given but not learned, the one-line note
    saying why (the state learner runs either way)."""
    from tttembed.serve.chain_engine import registry_spec

    if learner is None or not config.chain:
        return None, ""
    found = registry_spec(config.chain)
    why = ""
    if found is None:
        why = (f"--chain {config.chain} is base or a checkpoint folder: chain learning "
               "needs a chain registry (`tttembed states add FOLDER CHECKPOINT` makes one; "
               "serve --chain FOLDER)")
    elif found[1] is not None:
        why = (f"--chain {config.chain} pins {found[1]}: a pinned chain follows no "
               f"promotion, so none is learned (give --chain {found[0]} to follow and learn)")
    elif not learner.has_judge:
        why = ("--judge none pays nothing: chain learning pays a judge that scores texts "
               "(a reranker, an LLM judge, bm25 or a rerank: service)")
    if why or found is None:
        return None, f"note: --learn learns states only: {why}"
    return found[0], ""


def open_tasks_note(config: ServeConfig, learner: Any) -> str:
    """The one-line note a learning server with no ``--query-source`` gives at start-up:
    until a state names a task, it accepts every task and learns it under the name sent
    (by design: an empty registry learns its first tasks from traffic), so a typo'd task
    is logged as a new one; ``--query-source`` names the tasks and makes a typo a 404
    from the first request. Empty when there is nothing to say."""
    if learner is None or config.queries or config.unknown_task is not None:
        return ""
    return ("note: no --query-source names this server's tasks: until a promoted version "
            "names one, every task is accepted and learned under the name sent (a typo'd "
            "task becomes a new task); give --query-source DIR|FILE (one per task) to "
            "answer an unknown task with a 404 from the first request")


def with_learner(config: ServeConfig, learner: Any, *, announce: str = "") -> None:
    """``serve --learn``: the learner (``python -m tttembed loop ...``, niced, one torch
    thread) runs as a child process beside the server, and with ``--chain`` naming a
    chain registry a chain learner (the same ``loop`` command line plus ``--chain``,
    :func:`chain_to_learn`) beside it, on the same store, ledger and judge budget; both
    stop with the server: on SIGTERM or Ctrl-C the server finishes its requests, then
    stops them (SIGTERM, SIGKILL past 30 s) and says so; killed, its learners are killed
    by the kernel (:func:`die_with_server`)."""
    import subprocess
    import sys

    check_serve_states(config)
    chain, note = chain_to_learn(config, learner)
    for line in (note, open_tasks_note(config, learner)):
        if line:
            _say(line)
    argvs = [learner.argv(), *([[*learner.argv(), "--chain", chain]] if chain else [])]
    # the server already warned about an unaudited judge: its learner children say it once
    env = {**os.environ, SERVED_LEARNER_ENV: str(os.getpid())}
    children: list[Any] = []
    previous = signal.signal(signal.SIGTERM, _terminated)  # uvicorn re-raises it at exit
    forced = 0
    try:
        for argv in argvs:
            children.append(subprocess.Popen([sys.executable, "-m", "tttembed", *argv],
                                             env=env))
        run(config, announce=announce)
    except _Terminated as exc:
        forced = int(exc.args[0])
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop_learners(children)
    if forced:
        raise SystemExit(128 + forced)


def _stop_learners(children: list[Any]) -> None:
    """SIGTERM the learners, SIGKILL those still running 30 s later, and say how each
    ended."""
    import subprocess
    import time

    for child in children:
        child.terminate()
    deadline = time.monotonic() + 30
    for at, child in enumerate(children):
        try:
            code = child.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        logging.getLogger("tttembed.serve").info(
            "%slearner (pid %d) stopped with its server (exit code %s)",
            "chain " if at else "", child.pid, code)


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
