"""kill -9 during `learn` with an LLM judge at random points: pairs lost / paid twice.

    python tools/durability.py [WORK_DIR] [SEED] [--kills 10]   (default: a new temporary folder)

Goal: no answered pair lost; pairs paid twice <= the requests in flight at each kill.
Loopback servers only (tests/servers.py); bounded: ``--kills`` kills (default 10) and one
final run, which must find every pair asked so far in the ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.servers
from typer.testing import CliRunner  # noqa: E402

from tests.servers import LocalOpenAIServer, hash_vectors  # noqa: E402
from tttembed.cli import app  # noqa: E402


def write_task(data: Path) -> None:
    """80 documents and 40 queries of random words, one judged document each."""
    data.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(60)]
    rng = random.Random(0)
    with open(data / "corpus.jsonl", "w") as f:
        for i in range(80):
            f.write(json.dumps({"_id": f"d{i}", "text": " ".join(rng.sample(words, 6))}) + "\n")
    with open(data / "queries.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.sample(words, 3))}) + "\n")
    (data / "qrels").mkdir(exist_ok=True)
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(40)))


def chat(payload: Any) -> str:
    """A slow judge whose score (0-5) is fixed by the pair (``learn`` refuses rewards that
    are all the same)."""
    time.sleep(0.05)
    text = json.dumps(payload.get("messages", []), sort_keys=True)
    return f"Score: {zlib.crc32(text.encode()) % 6}"


def ledger_rows(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as c:
        return int(c.execute("select count(*) from rewards").fetchone()[0])


def kill_loop(args: list[str], judge: LocalOpenAIServer, ledger: Path, kills: int,
              seed: int) -> None:
    """Start ``learn`` ``kills`` times, each killed at a random point once scoring began."""
    krng = random.Random(seed)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in range(kills):
        before = len(judge.requests)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
        # wait until scoring started, then kill at a random point within the next second
        while len(judge.requests) == before and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(krng.uniform(0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.2)  # let the server finish answering requests already received
        ans = answered(judge)
        print(f"kill {k + 1}: pairs asked so far {len(ans)}, in the ledger "
              f"{ledger_rows(ledger)}, not committed (in flight) "
              f"{len(ans) - ledger_rows(ledger)}")


def answered(judge: LocalOpenAIServer) -> Counter[str]:
    return Counter(re.sub(r"\s+", " ", r.json["messages"][1]["content"])
                   for r in judge.requests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", nargs="?", type=Path, default=None, metavar="WORK_DIR")
    ap.add_argument("seed", nargs="?", type=int, default=1, metavar="SEED")
    ap.add_argument("--kills", type=int, default=10, help="learn runs killed (default 10)")
    opts = ap.parse_args(argv)
    tmp = opts.work or Path(tempfile.mkdtemp(prefix="tttembed-dur-"))
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "data"
    write_task(data)
    with LocalOpenAIServer(embed=hash_vectors) as emb, LocalOpenAIServer(chat=chat) as judge:
        r = CliRunner().invoke(app, ["index", str(data), "--out", str(tmp / "idx"), "-e",
                                     f"openai:m@{emb.url}", "--cache-dir", str(tmp / "c"),
                                     "--quiet"])
        assert r.exit_code == 0, r.output
        ledger = tmp / "ledger.sqlite"
        args = [sys.executable, "-c", "from tttembed.cli import main; main()", "learn",
                str(data), "--index", str(tmp / "idx"), "--scorer", f"llm:m@{judge.url}",
                "--budget", "5", "--depth", "5", "--ledger", str(ledger), "--cache-dir",
                str(tmp / "c"), "--out", str(tmp / "v.npz"), "--quiet", "--overwrite"]
        kill_loop(args, judge, ledger, opts.kills, opts.seed)
        proc = subprocess.run(args, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        ans = answered(judge)
        twice = sum(1 for c in ans.values() if c > 1)
        rows = ledger_rows(ledger)
        print(f"final run rc {proc.returncode}; distinct pairs {len(ans)}, ledger rows "
              f"{rows}, requests {len(judge.requests)}, pairs paid twice {twice}")
    return 0 if proc.returncode == 0 and rows == len(ans) else 1


if __name__ == "__main__":
    sys.exit(main())
