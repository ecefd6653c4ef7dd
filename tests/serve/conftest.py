"""Fixtures for the server tests: a tiny index of a few documents (the bundled MiniLM),
states learned on it through ``tttembed.api`` with the ``qrels`` scorer, and uvicorn
running the app in a thread on a free loopback port."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

TASK = "pets"
DOCS = {
    "d1": "Cats sleep for most of the day and hunt small animals at night.",
    "d2": "Dogs need daily walks and enjoy playing fetch in the park.",
    "d3": "Goldfish live in water tanks and need a filter to stay healthy.",
    "d4": "Parrots can learn to imitate human speech and live for decades.",
    "d5": "Rabbits eat hay and fresh vegetables and like to dig burrows.",
    "d6": "Hamsters store food in their cheek pouches and run on wheels.",
    "d7": "Turtles carry their shells and can live longer than a century.",
    "d8": "Horses are ridden, groomed and fed oats in stables.",
    "d9": "Snakes shed their skin several times a year as they grow.",
    "d10": "Canaries sing in the morning and are kept in cages.",
}
QUERIES = {"q1": "which pet talks like a person", "q2": "animal that lives in an aquarium",
           "q3": "pet that sleeps all day", "q4": "what do bunnies eat",
           "q5": "long lived reptile with armor", "q6": "animal that needs walking"}
QRELS = {"q1": {"d4": 1}, "q2": {"d3": 1}, "q3": {"d1": 1}, "q4": {"d5": 1},
         "q5": {"d7": 1}, "q6": {"d2": 1}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, minilm) -> dict[str, Any]:
    """Index, a task-wise and a query-wise state (learned on q1-q4), and a second
    task-wise state with other rewards (for reloads), plus the query file."""
    import tttembed.api as tt
    from tttembed.score.qrels import QrelsScorer

    root = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(root / "cache"))
        docs = {d: {"title": "", "text": t} for d, t in DOCS.items()}
        index = tt.index_corpus(docs, root / "index", embedder=minilm)
        learned = {q: QUERIES[q] for q in ("q1", "q2", "q3", "q4")}
        out: dict[str, Any] = {"root": root, "index": index, "docs": docs}
        for name, scope, qrels in (("task", "task", QRELS), ("query", "query", QRELS),
                                   ("other", "task", {"q1": {"d9": 1}, "q2": {"d8": 1},
                                                      "q3": {"d10": 1}, "q4": {"d6": 1}})):
            state = tt.learn(index, learned, scorer=QrelsScorer("labels", qrels=qrels),
                             scope=scope, budget=3, task=TASK, embedder=minilm, corpus=docs)
            out[name] = state.save(root / f"{name}.npz")
    qfile = root / f"{TASK}.jsonl"
    qfile.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                             for q, t in QUERIES.items()))
    out["queries"] = qfile
    return out


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def running(app: Any) -> Iterator[str]:
    """uvicorn serving ``app`` in a thread on a free loopback port; yields the base URL."""
    sock = free_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                          lifespan="on"))
    app.state.uvicorn = server
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def make_app(setup: dict[str, Any], minilm: Any, states: tuple[str, ...] = ("task", "query"),
             **options: Any) -> Any:
    from tttembed.serve import create_app

    paths = tuple(str(setup[s]) if s in setup else s for s in states)
    return create_app(index=str(setup["root"] / "index"), states=paths,
                      queries=(str(setup["queries"]),), embedder=minilm, **options)


@pytest.fixture(scope="module")
def server(setup, minilm) -> Iterator[str]:
    """The app with the task-wise and query-wise states and the query texts."""
    with running(make_app(setup, minilm)) as url:
        yield url


def state_copy(setup: dict[str, Any], name: str, dest: Path) -> None:
    """Replace ``dest`` (and its sidecar) with state ``name``'s files, atomically."""
    import os

    src = Path(setup[name])
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(src.read_bytes())
    os.replace(tmp, dest)


class WaitLog(threading.Condition):
    """A merging worker's queue condition that records each bounded wait for company as
    (timeout in s, whether company came): the batching policy checked without a clock.
    Set it as ``worker._queued`` before the first request."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.waits: list[tuple[float, bool]] = []

    def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
        came = super().wait_for(predicate, timeout)
        if timeout is not None:
            self.waits.append((timeout, bool(came)))
        return came
