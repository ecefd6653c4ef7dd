"""Which torch device a model runs on, and how many CPU threads it uses: one rule for
every torch-backed role (embedders, the chain encoder, the local rerankers, Ray actors).

``device=None`` (the default everywhere) means: the ``TTTEMBED_DEVICE`` environment
variable when set (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else ``cuda`` when torch sees a
GPU, else ``cpu``. An explicit device string is used as given.

**Threads** (:func:`use_threads`, called before every model call): the number given
(``threads=`` in Python, ``--threads`` on the command line), else ``TTTEMBED_THREADS``,
else the CPUs this process may use that nothing else keeps busy, measured from
``/proc/stat`` (at least one): once when a model first runs, then every
:data:`REMEASURE_S` seconds by a daemon thread, so it follows a machine whose load
changes and a process that was idle meanwhile is not judged by what ran then. torch's
intra-op threads spin while they wait: one more than the free cores costs an order of
magnitude when another process holds a core, and fewer than the free cores wastes an idle
machine. ``OMP_NUM_THREADS`` is not needed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from typing import Any

ENV = "TTTEMBED_DEVICE"
THREADS_ENV = "TTTEMBED_THREADS"
#: Seconds between two measurements of the free CPUs (each over the seconds before it).
REMEASURE_S = 0.5
#: The first measurement's sample (later ones use the time since the previous one).
FIRST_SAMPLE_S = 0.05


def pick_device(device: str | None = None) -> str:
    """The device to use for ``device`` (None: environment, then GPU when present)."""
    if device:
        return device
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_threads(limit: int = 8) -> int:
    """Worker threads for CPU-bound numpy work: the CPUs this process may use, at most
    ``limit``."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        n = os.cpu_count() or 1
    return max(1, min(limit, n))


def one_blas_thread() -> Any:
    """A context with one BLAS thread: for memory-bound passes over small pieces, extra
    BLAS threads only add synchronisation, which collapses when the cores are shared."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@functools.cache
def quiet_numpy_blas() -> None:
    """From the first call on, numpy's own BLAS (the OpenBLAS numpy's wheels carry) runs
    one thread in this process; FAISS's and torch's thread pools are left as they are.

    OpenBLAS's worker threads spin for a while after every call; a product as small as a
    state's map (3,000 x 384 by 384 x 8) or a neighbour lookup (32 x 384 by 384 x 300)
    wakes them, and the FAISS search or the model call that follows on the same cores
    runs at about half speed (measured on 2 cores: a FAISS search of 3,000 queries 66 ms
    alone, 126 ms right after such a product, 65 ms with this). Every numpy product on
    the project's hot paths is small or already runs in :func:`one_blas_thread`, so
    nothing loses its threads. Called by :func:`use_threads` and by the one home of
    applying a state (:func:`tttembed.adapt.apply.apply_states`); cached after the first
    call (two first calls at once set the same limit twice, harmlessly)."""
    try:
        import numpy
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover
        return
    home = os.path.dirname(os.path.abspath(numpy.__file__))
    for lib in ThreadpoolController().lib_controllers:
        path = os.path.abspath(lib.filepath or "")
        if lib.user_api == "blas" and (path.startswith(home + ".libs" + os.sep)
                                       or path.startswith(home + os.sep)):
            lib.set_num_threads(1)


def _cpu_times(cpus: set[int]) -> tuple[float, float]:
    """(idle, total) clock ticks of ``cpus`` from /proc/stat."""
    idle = total = 0.0
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            name, _, rest = line.partition(" ")
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                v = [float(x) for x in rest.split()[:8]]
                idle += v[3] + v[4]  # idle + iowait
                total += sum(v)
    return idle, total


class _FreeCpus:
    """The CPUs of this process's affinity that other processes leave idle, from the
    change of /proc/stat (and of this process's own CPU time) between two readings.

    The first call measures over :data:`FIRST_SAMPLE_S`; after it a daemon thread
    re-measures every :data:`REMEASURE_S` (``background=False``: the calls themselves
    re-measure, at most that often, over the time since the previous reading)."""

    def __init__(self, background: bool = True) -> None:
        self.lock = threading.Lock()
        self.last: tuple[float, float, float, float] | None = None  # wall, idle, total, own
        self.value = 0
        self.background = background
        self._sampler: threading.Thread | None = None

    def _read(self, cpus: set[int]) -> tuple[float, float, float, float]:
        t = os.times()
        idle, total = _cpu_times(cpus)
        return time.monotonic(), idle, total, t.user + t.system

    def __call__(self) -> int:
        try:
            cpus = set(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            return os.cpu_count() or 1
        with self.lock:
            fresh = self.last is not None and time.monotonic() - self.last[0] < REMEASURE_S
            if self.value and (self._sampler is not None or fresh):
                return self.value
            try:
                if self.last is None:
                    self.last = self._read(cpus)
                    time.sleep(FIRST_SAMPLE_S)
                self._measure(cpus)
            except (OSError, ValueError):  # no /proc: every CPU counts as free
                return len(cpus)
            if self.background and self._sampler is None:
                self._sampler = threading.Thread(target=self._sample, daemon=True,
                                                 name="tttembed-free-cpus")
                self._sampler.start()
            return self.value

    def _measure(self, cpus: set[int]) -> None:
        now = self._read(cpus)
        assert self.last is not None
        wall, idle, total, own = (b - a for a, b in zip(self.last, now))
        self.last = now
        if total <= 0 or wall <= 0:
            self.value = self.value or len(cpus)
            return
        busy = len(cpus) * (1.0 - idle / total) - own / wall  # others' CPUs in use
        self.value = max(1, min(len(cpus), len(cpus) - int(busy + 0.5)))

    def _sample(self) -> None:
        while True:
            time.sleep(REMEASURE_S)
            with self.lock:
                if self._sampler is not threading.current_thread():
                    return  # forgotten (a forked child starts its own)
                try:
                    self._measure(set(os.sched_getaffinity(0)))
                except (OSError, ValueError):
                    self.value = len(os.sched_getaffinity(0))

    def forget(self) -> None:
        """Start over (a forked child: the parent's sampler thread is not in it)."""
        self.lock = threading.Lock()
        self.last, self.value, self._sampler = None, 0, None


free_cpus = _FreeCpus()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=free_cpus.forget)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count`` elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def thread_count(threads: int | None = None) -> int:
    """The threads a torch model should use now (module docstring). An explicit count
    (``threads``, ``--threads``, $TTTEMBED_THREADS) above the CPUs this process may use is
    capped at them, with a warning (torch crashes on a pool of 99999 threads)."""
    if threads:
        return _capped(max(1, int(threads)), "--threads")
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        try:
            return _capped(max(1, int(env)), f"{THREADS_ENV} / --threads")
        except ValueError:
            from tttembed.core.errors import ConfigError

            raise ConfigError(f"{THREADS_ENV}={env!r} is not a number of threads") from None
    return free_cpus()


def _capped(n: int, source: str) -> int:
    cpus = usable_cpus()
    if n <= cpus:
        return n
    import warnings

    warnings.warn(f"{source} {n} is more than the {cpus} CPUs this process may use: "
                  f"using {cpus} threads", RuntimeWarning, stacklevel=3)
    return cpus


def use_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to :func:`thread_count` (a no-op when unchanged) and
    return it. Call it right before a model runs."""
    import torch

    quiet_numpy_blas()
    n = thread_count(threads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def use_faiss_threads(threads: int | None = None) -> int:
    """Set FAISS's OpenMP threads to :func:`thread_count` (a no-op when unchanged) and
    return it. Call it right before a FAISS search: its OpenMP threads spin and wait for
    each other as torch's do, so one more than the free cores stretches the tail (a flat
    search of 1-8 queries over 5,183 documents with one core held by another process:
    p99 4.5-4.8 ms on FAISS's 2 threads, 0.8 ms on 1; ``benchmarks/bench_faiss_threads.py``)."""
    import faiss

    n = thread_count(threads)
    if faiss.omp_get_max_threads() != n:
        faiss.omp_set_num_threads(n)
    return n


__all__ = ["ENV", "THREADS_ENV", "cpu_threads", "free_cpus", "one_blas_thread", "pick_device",
           "quiet_numpy_blas", "thread_count", "usable_cpus", "use_faiss_threads",
           "use_threads"]
