"""A stand-in for a production reranker service: the demo's labels behind a rerank API.

The closed loop's judge in production is a reranker service (vLLM, TEI, Cohere, Jina:
``--judge rerank:MODEL@URL``). None runs on a laptop without weights, so this script
serves one that answers from a BEIR folder's judgments (``qrels/test.tsv``) instead of a
model, over the same wire (Cohere's shape, ``POST /v1/rerank`` and ``POST /rerank``:
``{model, query, documents, top_n}`` -> ``{results: [{index, relevance_score}]}``):

* a (question, document) pair the labels grade ``g`` scores ``g / max grade``, an
  ungraded pair of a labelled question 0, plus seeded noise (``--noise``, default 0.15,
  the same for a pair every time it is asked, so a re-score agrees with the first score),
  clipped to [0, 1]: a good judge that still makes mistakes;
* a question the labels do not hold (found by its text) scores the fraction of its words
  in the document: a weak judge, as an unknown query deserves.

It is what the closed-loop guide's main flow uses; it is not a model, and its agreement
with the same labels' audit (``--audit qrels:FOLDER``) is what a good reranker would
earn, not a measurement of one.

    python examples/rerank_server.py data/stdlib-docs --port 8001
    tttembed serve ... --judge rerank:demo-labels@http://127.0.0.1:8001/v1 --corpus data/stdlib-docs

Stops on Ctrl-C or SIGTERM. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def read_folder(folder: Path, splits: tuple[str, ...] = ("test",)
                ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(document text -> id, question text -> id, qrels of ``splits``) of a BEIR folder."""
    docs, questions = {}, {}
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            docs[_norm(row["text"])] = row["_id"]
            docs[_norm(f"{row.get('title', '')} {row['text']}")] = row["_id"]
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions[_norm(row["text"])] = row["_id"]
    qrels: dict[str, dict[str, int]] = {}
    for split in splits:
        rows = (folder / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        for line in rows[1:]:
            qid, did, grade = line.split("\t")
            qrels.setdefault(qid, {})[did] = int(grade)
    return docs, questions, qrels


def _norm(text: str) -> str:
    return " ".join(text.split())


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9_]+", text.lower()))


class Judge:
    """Scores (question, document) pairs from the labels, with seeded per-pair noise."""

    def __init__(self, folder: Path, noise: float, seed: int,
                 splits: tuple[str, ...] = ("test",)) -> None:
        self.docs, self.questions, self.qrels = read_folder(folder, splits)
        self.top = max((g for q in self.qrels.values() for g in q.values()), default=1) or 1
        self.noise, self.seed = noise, seed

    def score(self, question: str, document: str) -> float:
        qid = self.questions.get(_norm(question))
        if qid is None:
            words = _words(question)
            return len(words & _words(document)) / max(len(words), 1)
        did = self.docs.get(_norm(document))
        grade = self.qrels.get(qid, {}).get(did, 0) if did is not None else 0
        key = f"{self.seed}\0{question}\0{document}".encode()
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        return min(1.0, max(0.0, grade / self.top + rng.gauss(0.0, self.noise)))

    def answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return 422, {"message": "the body needs 'query' (a string) and 'documents'"}
        docs = body.get("documents", body.get("texts"))
        if not isinstance(docs, list):
            return 422, {"message": "the body needs 'documents' (a list of strings)"}
        texts = [d if isinstance(d, str) else str(d.get("text", "")) for d in docs]
        scores = [self.score(body["query"], t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        top_n = body.get("top_n") or len(order)
        results = [{"index": i, "relevance_score": scores[i]} for i in order[:top_n]]
        return 200, {"id": "demo-labels", "results": results,
                     "meta": {"billed_units": {"search_units": 1}}}


class Drill:
    """Fault drills and accounting for load tests: answer HTTP 500 to every rerank request
    until ``fail_until`` (monotonic seconds), and append the number of pairs of each
    answered (200) request to ``count_file``, one line per request, after the answer is
    sent (a process killed mid-way loses no line of an answer it sent)."""

    def __init__(self, fail_for: float = 0.0, count_file: Path | None = None) -> None:
        self.fail_until = time.monotonic() + fail_for
        self.count_file = count_file
        self._lock = threading.Lock()

    def failing(self) -> bool:
        return time.monotonic() < self.fail_until

    def answered(self, pairs: int) -> None:
        if self.count_file is not None:
            with self._lock, open(self.count_file, "a", encoding="utf-8") as fh:
                fh.write(f"{pairs}\n")


def handler(judge: Judge, drill: Drill | None = None) -> type[BaseHTTPRequestHandler]:
    drill = drill or Drill()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/rerank", "/rerank"):
                return self._send(404, {"message": f"no route {self.path}: POST /v1/rerank"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            except ValueError:
                return self._send(400, {"message": "the body is not JSON"})
            if drill.failing():
                return self._send(500, {"message": "fault drill: failing on purpose"})
            status, answer = judge.answer(body)
            self._send(status, answer)
            if status == 200:
                drill.answered(len(body.get("documents", body.get("texts")) or []))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def check_args(args: argparse.Namespace) -> str:
    """What is wrong with the arguments, in one line with the fix ("" when nothing)."""
    if not 0 <= args.port <= 65535:
        return f"--port {args.port} is not a port; give 1-65535 (0: any free port)"
    if not math.isfinite(args.noise) or args.noise < 0:
        return (f"--noise {args.noise} is not a standard deviation; give a number >= 0 "
                "(0: the labels exactly)")
    if not math.isfinite(args.fail_for) or args.fail_for < 0:
        return f"--fail-for {args.fail_for} is not a number of seconds; give a number >= 0"
    splits = _splits(args)
    missing = [s for s in splits if not (args.folder / "qrels" / f"{s}.tsv").is_file()]
    if missing or not splits:
        return (f"{args.folder}/qrels/{(missing or ['test'])[0]}.tsv not found; export the "
                "demo first (tttembed demo --export data/stdlib-docs)")
    return ""


def _splits(args: argparse.Namespace) -> tuple[str, ...]:
    """The qrels splits the labels come from (``--splits``)."""
    return tuple(s for s in args.splits.split(",") if s)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a BEIR folder with qrels/test.tsv "
                        "(the demo's: tttembed demo --export data/stdlib-docs)")
    parser.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1 (default 8001)")
    parser.add_argument("--noise", type=float, default=0.15,
                        help="standard deviation of the seeded per-pair noise (default 0.15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise (default 0)")
    parser.add_argument("--splits", default="test", help="qrels files the labels come "
                        "from, comma-separated (default test; e.g. train,test)")
    parser.add_argument("--fail-for", type=float, default=0.0, help="fault drill: answer "
                        "HTTP 500 to every rerank request for the first SECONDS after start")
    parser.add_argument("--count-file", type=Path, help="append the number of pairs of "
                        "each answered request to this file (one line per request)")
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        judge = Judge(args.folder, args.noise, args.seed, _splits(args))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.folder} is not a readable BEIR folder ({type(exc).__name__}: "
              f"{exc}); export the demo again (tttembed demo --export data/stdlib-docs)",
              file=sys.stderr)
        return 2
    try:
        server = ThreadingHTTPServer(("127.0.0.1", args.port),
                                     handler(judge, Drill(args.fail_for, args.count_file)))
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port} ({exc.strerror or exc}); "
              "stop what uses it or give another --port (0: any free port)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"rerank stand-in on http://127.0.0.1:{server.server_address[1]}/v1 "
          f"(labels of {args.folder}, noise {args.noise})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
