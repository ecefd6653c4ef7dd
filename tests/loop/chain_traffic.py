"""A tiny served chain retriever with traffic, a stand-in judge and a chain registry, for
the chain learner's tests: the tiny multi-hop corpus of the chain tests, each question
asked in :data:`VARIANTS` wordings (distinct texts, so some are held out by text), its
labels behind ``examples/rerank_server.py`` (no noise), and the texts the server encoded."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import threading
import time
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.chain.conftest import CHAINS, write_dataset
from tests.serve.conftest import running

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("{q}", "Please tell me: {q}", "{q} Answer briefly.", "Question: {q}",
            "I wonder, {q}", "Quick one. {q}", "{q} Thanks!", "Help me out: {q}",
            "Trivia: {q}", "{q} (homework)")


def questions() -> list[tuple[str, str, list[str]]]:
    """(qid, question text, gold chain) of every wording."""
    return [(f"{qid}-{i}", v.format(q=q), chain) for qid, q, chain in CHAINS
            for i, v in enumerate(VARIANTS)]


def write_judged_dataset(folder: Path) -> None:
    """The tiny corpus and chains, plus the queries and train labels the judge reads."""
    write_dataset(folder)
    rows = questions()
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": qid, "text": q}) + "\n" for qid, q, _ in rows))
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{qid}\t{d}\t1\n" for qid, _, chain in rows
                                                   for d in chain))


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Turnable:
    """The judge, answering ``1 - score`` for every pair once ``turned`` is set: a judge
    swapped (or poisoned) between two cycles."""

    def __init__(self, judge: Any, turned: threading.Event) -> None:
        self.judge, self.turned = judge, turned

    def answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        status, out = self.judge.answer(body)
        if status == 200 and self.turned.is_set():
            for r in out["results"]:
                r["relevance_score"] = 1.0 - r["relevance_score"]
        return status, out


@contextmanager
def judge_server(folder: Path, count_file: Path, fail_for: float = 0.0,
                 port_of: str | None = None, turned: threading.Event | None = None,
                 latency: float = 0.0):
    """The stand-in judge (labels of ``folder``'s train split, no noise) on a free port
    (``port_of``: the port of that URL, a judge back where it was); yields its URL. Every
    pair it answers is appended to ``count_file``. ``turned``: once set, every answer is
    turned around (:class:`Turnable`); ``latency``: seconds each request waits first."""
    rerank = _example("rerank_server")
    judge = Turnable(rerank.Judge(folder, 0.0, 0, ("train",)), turned or threading.Event())
    drill = rerank.Drill(fail_for, count_file)
    port = 0 if port_of is None else int(port_of.rsplit(":", 1)[1].split("/")[0])
    ThreadingHTTPServer.allow_reuse_address = True
    base = rerank.handler(judge, drill)

    class Slow(base):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:
            time.sleep(latency)
            super().do_POST()

    server = ThreadingHTTPServer(("127.0.0.1", port), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", drill
    finally:
        server.shutdown()
        server.server_close()


def answered(count_file: Path) -> int:
    """Pairs the judge answered so far."""
    if not count_file.exists():
        return 0
    return sum(int(x) for x in count_file.read_text().split())


def serve_traffic(setup: dict[str, Any], minilm: Any, chain: str, states: str,
                  asked: list[str], chain_state: str | None = None) -> list[str]:
    """Ask every question of ``asked`` once (the server's default hops; ``chain_state``:
    its ``--chain-state``); the texts the server encoded, in order."""
    from tttembed.serve import create_app

    app = create_app(index=str(setup["index"]), chain=chain, registry=states,
                     embedder=minilm, registry_poll_s=0.1, chain_state=chain_state)
    source = app.state.service.chain.source
    seen: list[str] = []
    inner = source.current.encode

    def recording(texts):
        seen.extend(texts)
        return inner(texts)

    source.current = dataclasses.replace(source.current, encode=recording)
    with running(app) as url:
        for q in asked:
            r = httpx.post(f"{url}/v1/chain/search", json={"question": q}, timeout=60)
            assert r.status_code == 200, r.text
    return seen


def chain_loop(setup: dict[str, Any], judge_url: str, work: Path, **options: Any) -> Any:
    """A ChainLoop over the served traffic (the state registry's store)."""
    from tttembed.cli.loop import loop_config
    from tttembed.loop.chain.run import ChainLoop

    kw = {"judge_budget": 1000, "judge_rpm": 100000.0, "learn_every": 10000,
          "min_queries": 2, "corpus": setup["data"], "poll_s": 0.01, **options}
    config = loop_config(work / "states", setup["index"], f"rerank:tiny@{judge_url}", **kw)
    return ChainLoop(config, str(work / "chain"))
