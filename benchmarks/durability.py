"""kill -9 during `learn` with an LLM judge at 10 random points: pairs lost / paid twice.

    python benchmarks/durability.py [WORK_DIR] [seed]      (default: a new temporary folder)

Goal: no answered pair lost; pairs paid twice <= the requests in flight at each kill.
Loopback servers only (tests/servers.py); bounded: 10 kills and one final run.
"""

from __future__ import annotations

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
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.servers
from typer.testing import CliRunner  # noqa: E402

from tests.servers import LocalOpenAIServer, hash_vectors  # noqa: E402
from tttembed.cli import app  # noqa: E402

tmp = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="tttembed-dur-"))
tmp.mkdir(parents=True, exist_ok=True)
data = tmp / "data"
data.mkdir(exist_ok=True)
words = [f"w{i}" for i in range(60)]
rng = random.Random(0)
with open(data / "corpus.jsonl", "w") as f:
    for i in range(80):
        f.write(json.dumps({"_id": f"d{i}", "text": " ".join(rng.sample(words, 6))}) + "\n")
with open(data / "queries.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.sample(words, 3))}) + "\n")
(data / "qrels").mkdir(exist_ok=True)
(data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(40)))

def chat(payload):
    time.sleep(0.05)
    return "Score: 3"

with LocalOpenAIServer(embed=hash_vectors) as emb, LocalOpenAIServer(chat=chat) as judge:
    r = CliRunner().invoke(app, ["index", str(data), "--out", str(tmp / "idx"), "-e", f"openai:m@{emb.url}", "--cache-dir", str(tmp / "c"), "--quiet"])
    assert r.exit_code == 0, r.output
    ledger = tmp / "ledger.sqlite"
    args = [sys.executable, "-c", "from tttembed.cli import main; main()", "learn", str(data), "--index", str(tmp / "idx"),
            "--scorer", f"llm:m@{judge.url}", "--budget", "5", "--depth", "5", "--ledger", str(ledger),
            "--cache-dir", str(tmp / "c"), "--out", str(tmp / "v.npz"), "--quiet", "--overwrite"]
    def answered():
        return Counter(re.sub(r"\s+", " ", r.json["messages"][1]["content"]) for r in judge.requests)
    def rows():
        if not ledger.exists():
            return 0
        with sqlite3.connect(ledger) as c:
            return c.execute("select count(*) from rewards").fetchone()[0]
    krng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    for k in range(10):
        before = len(judge.requests)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
        # wait until scoring started, then kill at a random point within the next second
        while len(judge.requests) == before and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(krng.uniform(0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.2)  # let the server finish answering requests already received
        ans = answered()
        print(f"kill {k + 1}: pairs asked so far {len(ans)}, in the ledger {rows()}, not committed (in flight) {len(ans) - rows()}")
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ans = answered()
    twice = sum(1 for c in ans.values() if c > 1)
    print(f"final run rc {proc.returncode}; distinct pairs {len(ans)}, ledger rows {rows()}, requests {len(judge.requests)}, pairs paid twice {twice}")
