"""Where the closed-loop guide's judge budget goes: pairs paid in all, on served pairs, on
audits, and the learning cycles that ran.

    python benchmarks/bench_loop_audit_spend.py [--repeat 2] [--budget 2000]
        [--learn-every 100] [--modules json,csv] [--wait-s 180] [--work DIR] [--json OUT]

The guide's main command (docs/guides/closed-loop.md, ``<!-- loop -->``) on the demo
data: ``tttembed demo --export DATA``, ``tttembed index DATA --out IDX``, then ``tttembed
serve --index IDX --registry REG --learn --judge bm25 --audit qrels:DATA --corpus DATA
--judge-budget 2000 --learn-every 100`` (plus ``--audit-share`` when given), and the
demo's questions asked ``--repeat`` times each through ``POST /v1/search`` (task
``stdlib-docs``: 87 questions x 2 = 174 searches). Then it waits until the learner is idle
(or ``--wait-s``) and reads ``GET /v1/loop``: the spend account by source (``judge``: served
pairs; ``validation``; ``audit`` + ``drift``: audits), the cycles and the versions.

Goal (issue 49): all audits together stay within the audit share (default 20%) of the
judge budget. The cycles are reported only: BM25 fails the audit on the demo, so
promotions freeze and no cycle runs (the guide's second example); the guide's main flow,
with a judge that passes its audit, is run as written by ``tests/loop/test_guide.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import cli, free_port, src_env, stop, wait_healthy, write_json
from claims import Goal, emit

GOALS = {
    "total": Goal("loop audit spend: pairs paid in all", "info", None, " pairs"),
    "served": Goal("loop audit spend: pairs paid on served pairs", "info", None, " pairs"),
    "audits": Goal("loop audit spend: share of the budget paid on audits", "<=", 0.2),
    # with BM25 the audit freezes promotions on the demo (as it should): cycles are 0 there
    "cycles": Goal("loop audit spend: learning cycles", "info", None),
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2, help="times each question is asked")
    ap.add_argument("--budget", type=int, default=2000, help="--judge-budget")
    ap.add_argument("--learn-every", type=int, default=100, help="--learn-every")
    ap.add_argument("--audit-share", type=float, help="--audit-share (default: the server's)")
    ap.add_argument("--modules", default="", help="demo modules (default: the whole demo)")
    ap.add_argument("--wait-s", type=float, default=180.0, help="most seconds to wait for "
                    "the learner to be idle after the searches")
    ap.add_argument("--work", type=Path, help="work folder to keep (default: a temp one)")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    return ap


def _prepare(work: Path, modules: str, env: dict[str, str]) -> tuple[Path, Path]:
    data, idx = work / "data" / "stdlib-docs", work / "idx" / "stdlib-docs"
    extra = ["--modules", modules] if modules else []
    subprocess.run(cli("demo", "--export", str(data), *extra), check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run(cli("index", str(data), "--out", str(idx), "--quiet"), check=True,
                   env=env, stdout=subprocess.DEVNULL)
    return data, idx


def _idle(status: dict[str, Any], since: float) -> bool:
    stamp = status.get("updated") or ""
    fresh = bool(stamp) and time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) \
        - time.timezone >= since + 1.0
    return fresh and bool(status.get("idle")) and not status.get("learning")


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import httpx

    env = src_env(TTTEMBED_CACHE_DIR=str(work / "cache"), TOKENIZERS_PARALLELISM="false")
    data, idx = _prepare(work, args.modules, env)
    port = free_port()
    extra = ["--audit-share", str(args.audit_share)] if args.audit_share is not None else []
    cmd = cli("serve", "--index", str(idx), "--registry", str(work / "reg" / "stdlib-docs"),
              "--learn", "--judge", "bm25", "--audit", f"qrels:{data}", "--corpus", str(data),
              "--judge-budget", str(args.budget), "--learn-every", str(args.learn_every),
              "--port", str(port), "--log-level", "warning", *extra)
    log = work / "serve.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 300, log)
        texts = [json.loads(line)["text"] for line in
                 (data / "queries.jsonl").read_text().splitlines() if line.strip()]
        with httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(args.repeat):
                for text in texts:
                    client.post("/v1/search", json={"query": text, "task": "stdlib-docs"}
                                ).raise_for_status()
            since = time.time()
            deadline = time.monotonic() + args.wait_s
            status = client.get("/v1/loop").json()
            while time.monotonic() < deadline and not _idle(status, since):
                time.sleep(1.0)
                status = client.get("/v1/loop").json()
    finally:
        stop(proc)
    spend = {k: int(v) for k, v in (status.get("spend") or {}).items()}
    return {"searches": args.repeat * len(texts), "budget": args.budget,
            "paid": sum(spend.values()), "spend": spend,
            "served": spend.get("judge", 0), "validation": spend.get("validation", 0),
            "audits": spend.get("audit", 0) + spend.get("drift", 0),
            "cycles": status.get("cycles", 0), "versions": len(status.get("versions", [])),
            "idle": _idle(status, since), "frozen": status.get("frozen"),
            "budget_status": status.get("budget"),
            "audit_entries": [{k: a.get(k) for k in ("pairs", "auc", "passed", "note")}
                              for a in status.get("audits", [])]}


def main() -> int:
    args = _parser().parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-audit-spend-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        got = measure(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(got, indent=1))
    print(f"{got['searches']} searches: {got['paid']} of {got['budget']} pairs paid, "
          f"{got['served']} on served pairs, {got['validation']} on validation, "
          f"{got['audits']} on audits; {got['cycles']} cycle(s)")
    write_json(args.json, got)
    emit(GOALS, {"total": got["paid"], "served": got["served"],
                 "audits": got["audits"] / max(got["budget"], 1),
                 "cycles": got["cycles"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
