"""What the closed-loop benchmarks share (``bench_loop_gain.py``, ``bench_loop_states.py``):
the subprocesses they start (:class:`Children`), the task's judged queries
(:func:`load_data`), the server under test (:func:`start_serve`: ``tttembed serve
--registry DIR`` on 127.0.0.1), one ``/v1/search`` client (:class:`Api`, :class:`Sample`),
the learner's status (:class:`Poller`, :func:`wait_learner`, :func:`wait_idle`), and the
command line and work folder every one of them has (:func:`parser`, :func:`run`).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _support import cli, free_port, src_env, wait_healthy

K = 10


# -- processes ----------------------------------------------------------------------------
class Children:
    """Every subprocess this benchmark starts, each in its own process group, stopped on
    exit (normal, exception, Ctrl-C or SIGTERM)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        atexit.register(self.stop_all)

    def start(self, cmd: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        """Start ``cmd`` in its own process group; a SIGINT/SIGTERM that arrives while
        it starts is held until the child is in :attr:`procs`, so the stop reaches it."""
        with _signals_held():
            fh = open(log, "ab")
            proc = subprocess.Popen(list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            fh.close()
            self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 40.0) -> None:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)
        _signal_group(proc, signal.SIGKILL)  # a learner child left behind, if any
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM noted, not handled, for the block; then handled as they came
    (the handler that was in place runs, once per signal). Off the main thread: as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        for signum in held:
            os.kill(os.getpid(), signum)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


CHILDREN = Children()


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


# -- the task -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskData:
    name: str
    queries: dict[str, str]                  # judged qid -> text
    qrels: dict[str, dict[str, int]]
    relevant_texts: dict[str, frozenset[str]]  # query text -> texts of relevant docs


def load_data(path: Path, split: str) -> TaskData:
    from tttembed.data.beir import doc_text, load_task
    from tttembed.metrics.ranking import evaluated_queries

    task = load_task(path, split=split)
    judged = set(evaluated_queries(task.qrels))
    queries = {q: t for q, t in task.queries.items() if q in judged}
    rel: dict[str, set[str]] = {}
    for qid, text in queries.items():
        docs = {doc_text(task.corpus[d]) for d, g in task.qrels[qid].items()
                if g > 0 and d in task.corpus}
        rel.setdefault(text, set()).update(docs)
    return TaskData(task.name, queries, {q: dict(task.qrels[q]) for q in queries},
                    {t: frozenset(d) for t, d in rel.items()})


# -- HTTP clients -----------------------------------------------------------------------------
@dataclass
class Sample:
    """One /v1/search request."""

    qid: str
    kind: str            # "window" or "probe"
    window: int
    sent: float          # wall clock
    done: float
    ok: bool
    version: str | None = None
    ids: list[str] = field(default_factory=list)
    state: str = "?"     # the learner's state when sent: learning, judging or idle
    burst: bool = False  # sent while a window's burst was on
    error: str = ""

    @property
    def latency(self) -> float:
        return self.done - self.sent


class Api:
    """One httpx client per thread against the server under test."""

    def __init__(self, url: str, task: str) -> None:
        self.url = url
        self.task = task
        self._local = threading.local()

    def client(self) -> Any:
        import httpx

        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = httpx.Client(base_url=self.url, timeout=60.0)
        return c

    def search(self, qid: str, text: str, kind: str, window: int, state: str,
               burst: bool) -> Sample:
        sent = time.time()
        try:
            r = self.client().post("/v1/search", json={"queries": [text], "task": self.task,
                                                       "k": K})
            done = time.time()
            if r.status_code != 200:
                return Sample(qid, kind, window, sent, done, False, state=state, burst=burst,
                              error=f"{r.status_code} {r.text[:200]}")
            body = r.json()
            return Sample(qid, kind, window, sent, done, True, body.get("version"),
                          list(body["data"][0]["ids"]), state, burst)
        except Exception as exc:  # noqa: BLE001  (a failed request is a measured outcome)
            return Sample(qid, kind, window, sent, time.time(), False, state=state,
                          burst=burst, error=f"{type(exc).__name__}: {exc}")

    def loop_status(self) -> dict[str, Any]:
        r = self.client().get("/v1/loop")
        r.raise_for_status()
        return dict(r.json())


class Poller(threading.Thread):
    """Polls ``GET /v1/loop`` every ``period`` s; ``state`` is the learner's latest."""

    def __init__(self, api: Api, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.api, self.period = api, period
        self.latest: dict[str, Any] = {}
        self.at = 0.0
        self.learning_s = 0.0
        self.stop = threading.Event()

    @property
    def state(self) -> str:
        s = self.latest
        return "learning" if s.get("learning") else "idle" if s.get("idle") else "judging"

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                got = self.api.loop_status()
                now = time.time()
                if self.latest.get("learning") and self.at:
                    self.learning_s += now - self.at
                self.latest, self.at = got, now
            except Exception:  # noqa: BLE001  (the server may be restarting)
                pass
            self.stop.wait(self.period)


# -- the server under test ------------------------------------------------------------------
@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    registry: Path
    env: dict[str, str]


def server_env(cache: Path) -> dict[str, str]:
    return src_env(TTTEMBED_CACHE_DIR=str(cache))


def start_serve(index: Path, registry: Path, work: Path, extra: Sequence[str],
                name: str, port: int = 0) -> Server:
    """``tttembed serve --registry DIR [extra]`` on ``port`` (0: a free one); returns
    once /healthz answers."""
    proc, url = spawn_serve(index, registry, work, extra, name, port)
    wait_healthy(url, proc, 300, work / f"{name}.log")
    return Server(proc, url, registry, server_env(work / "cache"))


def spawn_serve(index: Path, registry: Path, work: Path, extra: Sequence[str],
                name: str, port: int = 0) -> tuple[subprocess.Popen, str]:
    """Start ``tttembed serve`` without waiting for it: (process, base URL)."""
    port = port or free_port()
    cmd = cli("serve", "--index", str(index), "--registry", str(registry), "--port",
              str(port), "--log-level", "warning", *extra)
    proc = CHILDREN.start(cmd, work / f"{name}.log", server_env(work / "cache"))
    return proc, f"http://127.0.0.1:{port}"


def wait_learner(api: Api, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.loop_status()["learner"]["running"]:
            return
        time.sleep(0.3)
    raise SystemExit("the learner wrote no loop.json within the timeout")


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return float(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone)


def wait_idle(poller: Poller, since: float, timeout: float, settle: float = 2.0) -> bool:
    """True once the learner says idle (not learning) in statuses written after
    ``since`` + 1 s, for ``settle`` s in a row (a status written by a step that began
    before the last request is not taken for the new traffic's)."""
    deadline = time.monotonic() + timeout
    idle_from: float | None = None
    while time.monotonic() < deadline:
        s = poller.latest
        fresh = _epoch(s.get("updated")) >= since + 1.0
        if fresh and s.get("idle") and not s.get("learning"):
            idle_from = idle_from or time.monotonic()
            if time.monotonic() - idle_from >= settle:
                return True
        else:
            idle_from = None
        if s.get("learner", {}).get("error"):
            print(f"   learner error: {s['learner']['error']}")
        time.sleep(0.1)
    return False


def jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


# -- command line and work folder --------------------------------------------------------------
def parser(doc: str) -> argparse.ArgumentParser:
    """The options every loop benchmark has: DATA, --index, --split, --seed, --port,
    --json, --keep."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, metavar="DATA", help="BEIR task folder")
    ap.add_argument("--index", type=Path, help="its index (built into the temp folder "
                    "once when absent)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0, help="port of the server under test "
                    "(several servers: PORT, PORT+1, ...); default: free ones")
    ap.add_argument("--json", type=Path, help="write rows and goals as JSON")
    ap.add_argument("--keep", type=Path, help="work folder to keep (registry, logs)")
    return ap


def ensure_index(args: argparse.Namespace, work: Path) -> None:
    if args.index is None:
        args.index = Path(tempfile.gettempdir()) / f"bench-loop-index-{args.data.name}"
    if (args.index / "CURRENT").exists() or (args.index / "manifest.json").exists():
        return
    print(f"indexing {args.data} into {args.index} (once; reused with --index)")
    env = server_env(work / "index-cache")
    subprocess.run(cli("index", str(args.data), "-o", str(args.index), "--quiet"),
                   check=True, env=env)


@contextmanager
def work_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        if any(keep.iterdir()):
            raise SystemExit(f"--keep {keep} is not empty (each run needs a fresh registry)")
        yield keep
        print(f"kept {keep}")
        return
    work = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        yield work
    finally:
        CHILDREN.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, measure: Callable[[argparse.Namespace, Path], int]) -> int:
    """``measure(args, work)`` in a fresh work folder, with the task indexed; every server
    stopped on the way out (SIGTERM and Ctrl-C included)."""
    signal.signal(signal.SIGTERM, _terminate)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        with work_dir(args.keep) as work:
            try:
                ensure_index(args, work)
                return measure(args, work)
            finally:
                CHILDREN.stop_all()
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
