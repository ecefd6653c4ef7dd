"""The learner process's life on the system, shared by ``tttembed loop``
(:mod:`tttembed.loop.run`) and ``tttembed loop --chain`` (:mod:`tttembed.loop.chain.run`):
its CPU priority (:func:`lower_priority`: ``--nice``, so that on a small machine serving
keeps its latency while a cycle runs) and the stop of ``tttembed loop``: SIGTERM/SIGINT
give the step in flight :data:`GRACE_S` seconds, past them the process exits with
:data:`FORCED_EXIT` (:func:`stopper`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Protocol

log = logging.getLogger("tttembed.loop")


class Stoppable(Protocol):
    """A learner's loop as its stop sees it: the event its steps watch, and its close."""

    stop: threading.Event

    def close(self) -> None: ...


#: Seconds the step in flight gets after SIGTERM/SIGINT before the process exits anyway
#: (a judge that stopped answering keeps its client retrying; every reward it answered is
#: already committed, so an exit loses only the request in flight).
GRACE_S = 5.0
#: The exit status of a stop forced after :data:`GRACE_S` (the step in flight cut off).
FORCED_EXIT = 3


def stopper(loop: Stoppable) -> Any:
    """The SIGTERM/SIGINT handler of ``loop``: stop its steps; past :data:`GRACE_S` the
    process exits with :data:`FORCED_EXIT`."""
    def stop(*_: Any) -> None:
        loop.stop.set()
        timer = threading.Timer(GRACE_S, _force_exit, args=(loop,))
        timer.daemon = True
        timer.start()

    return stop


def _force_exit(loop: Stoppable) -> None:
    """The step in flight did not finish within the grace: close the store (its lock
    taken within a second: a transaction in flight is rolled back by the exit) and exit
    non-zero."""
    log.error("the step in flight did not finish within %.0f s of the stop; exiting "
              "(every reward already answered is committed)", GRACE_S)
    closer = threading.Thread(target=_quiet_close, args=(loop,), daemon=True)
    closer.start()
    closer.join(1.0)
    sys.stderr.flush()
    os._exit(FORCED_EXIT)


def _quiet_close(loop: Stoppable) -> None:
    try:
        loop.close()
    except Exception:  # noqa: BLE001  (exiting anyway)
        pass


def lower_priority(nice: int) -> None:
    """A learner's CPU priority offset (``--nice``: serving first); where the system
    refuses it, the learner runs at its parent's priority."""
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass


__all__ = ["FORCED_EXIT", "GRACE_S", "Stoppable", "lower_priority", "stopper"]
