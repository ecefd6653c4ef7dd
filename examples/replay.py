"""Replay a BEIR folder's questions as live traffic to a learning server, and measure it.

The closed-loop guide's traffic: every question of the folder is searched through
``POST /v1/search`` (``--rounds`` times: questions that recur, as head queries do), then
the script waits until the learner has nothing left to do (``/v1/loop`` says idle) and
searches every question once more. It prints the served nDCG@10 on the folder's labels
before (the first round) and after (the last), each beside the version that served it:
the raw baseline stands beside the adapted figure. The questions are the ones the loop
learned from (query-wise vectors serve exactly those texts), so the gain is in-sample:
what the same questions get when they are asked again.

    python examples/replay.py data/stdlib-docs --url http://127.0.0.1:8000 --rounds 2

Standard library plus tttembed's metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tttembed.metrics.ranking import run_metrics


class NotTheServer(Exception):
    """The server answered, but not as a tttembed server does (one line: what it said)."""


def request(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read()
    except urllib.error.HTTPError as exc:
        raise NotTheServer(f"{url} answered HTTP {exc.code} {exc.reason}") from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise NotTheServer(f"{url} answered with something that is not JSON") from None
    if not isinstance(doc, dict):
        raise NotTheServer(f"{url} answered JSON that is not an object")
    return doc


def read_folder(folder: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    questions = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions[row["_id"]] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, grade = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(grade)
    return {q: t for q, t in questions.items() if q in qrels}, qrels


def search_all(url: str, task: str,
               questions: dict[str, str]) -> tuple[dict[str, dict[str, float]], str]:
    """One round: every question searched once; the run the server served, and the
    version(s) that served it (each answer's ``version``)."""
    run, versions = {}, []
    for qid, text in questions.items():
        body = request(f"{url}/v1/search", {"query": text, "task": task, "k": 10})
        try:
            hit = body["data"][0]
            run[qid] = {d: float(s) for d, s in zip(hit["ids"], hit["scores"])}
        except (KeyError, IndexError, TypeError, ValueError):
            raise NotTheServer(f"{url}/v1/search answered without a search result "
                               "('data': [{'ids', 'scores'}])") from None
        name = str(body.get("version") or "raw")
        if name not in versions:
            versions.append(name)
    return run, "/".join(versions)


def wait_following(url: str, limit: float = 60.0) -> None:
    """Wait until this server serves the version the registry names: a promotion reaches
    a serving process within its registry poll, after ``/v1/loop`` already names it."""
    start = time.monotonic()
    while True:
        loop = request(f"{url}/v1/loop")
        named = loop.get("version")
        serving = (loop.get("serving") or {}).get("version")
        if named == serving or time.monotonic() - start > limit:
            return
        time.sleep(0.5)


def wait_idle(url: str, limit: float) -> dict[str, Any]:
    """Poll ``/v1/loop`` until the learner is idle (its cycles done), printing progress.
    Idle counts only from the learner's second step after the traffic (its status
    ``updated`` changed twice), so an idle status written before the traffic is not read
    as the end."""
    start, last = time.monotonic(), ""
    seen = [request(f"{url}/v1/loop").get("updated")]
    while True:
        loop = request(f"{url}/v1/loop")
        if loop.get("updated") != seen[-1]:
            seen.append(loop.get("updated"))
        line = (f"  learner: pairs judged {loop.get('pairs_judged')} of "
                f"{loop.get('judge_budget')}, versions {len(loop.get('versions') or [])}, "
                f"serving {loop.get('version') or 'raw'}"
                + (f", frozen: {loop.get('reason')}" if loop.get("frozen") else ""))
        if line != last:
            print(line, flush=True)
            last = line
        if len(seen) > 2 and loop.get("idle") and not loop.get("learning"):
            return dict(loop)
        if time.monotonic() - start > limit:
            print(f"  the learner is still busy after {limit:.0f} s; measuring now", flush=True)
            return dict(loop)
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the BEIR folder the server's index was built from")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
    parser.add_argument("--task", help="the task name (default: the folder's name)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="times every question is asked before the learner is awaited (default 2)")
    parser.add_argument("--wait", type=float, default=600.0,
                        help="seconds to wait for the learner to become idle (default 600)")
    args = parser.parse_args(argv)
    task = args.task or args.folder.name
    try:
        questions, qrels = read_folder(args.folder)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.folder} is not a readable BEIR folder ({type(exc).__name__}: "
              f"{exc}); give the folder the server's index was built from (the demo's: "
              "tttembed demo --export data/stdlib-docs)", file=sys.stderr)
        return 2
    try:
        runs = [search_all(args.url, task, questions) for _ in range(max(args.rounds, 1))]
        print(f"{len(questions) * len(runs)} searches sent ({len(questions)} questions x "
              f"{len(runs)}); waiting for the learner", flush=True)
        loop = wait_idle(args.url, args.wait)
        wait_following(args.url)
        after, after_version = search_all(args.url, task, questions)
    except NotTheServer as exc:
        print(f"error: {exc}: is it a tttembed server? give --url of `tttembed serve` "
              "(see docs/guides/closed-loop.md)", file=sys.stderr)
        return 2
    except (OSError, urllib.error.URLError) as exc:
        print(f"error: {args.url}: {exc}; start the server first (see docs/guides/closed-loop.md)",
              file=sys.stderr)
        return 2
    first, before_version = runs[0]
    b = run_metrics(qrels, first, ("ndcg@10",))["ndcg@10"]
    a = run_metrics(qrels, after, ("ndcg@10",))["ndcg@10"]
    print(f"served nDCG@10 on the folder's labels ({len(questions)} questions, asked again): "
          f"{before_version} {b:.4f} -> {after_version} {a:.4f} ({a - b:+.4f})")
    budget = loop.get("budget") or {}
    print(f"judge pairs paid {loop.get('pairs_judged')} of {loop.get('judge_budget')}"
          + (f" (audits {budget['audit_pairs']})" if "audit_pairs" in budget else "")
          + (f"; promotions frozen: {loop.get('reason')}" if loop.get("frozen") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
