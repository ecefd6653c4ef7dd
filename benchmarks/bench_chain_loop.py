"""Chain retrieval learning on-policy from its own traffic.

    python benchmarks/bench_chain_loop.py --data FOLDER [--budget PAIRS] --json OUT

FOLDER is shaped like ``../shared/data/2wikimultihopqa`` (``corpus.jsonl``,
``chains_train.jsonl``, ``chains_test.jsonl``). The untrained chain is served
(``tttembed serve --chain CHAIN_REGISTRY`` on an empty chain registry, in this process on
127.0.0.1); every train question is asked once per round (``--rounds``) as traffic; the
stand-in judge (``examples/rerank_server.py``) answers from the train chains' labels with
seeded noise (``--noise``, 0.15 as in the soak; ``--seed``, the draw); after each round
the chain learner (``tttembed loop --chain ... --once``: judge within the budget, train a candidate
warm-started from the served version, check it on the train questions held out by text,
promote it only when better) runs one cycle. Then C@5 is measured with the gold chains on
the test questions (never asked, never judged) for the untrained encoder and every
registered version, at the served setting: T = ``--max-hops`` (every search asks for it;
default the served encoder's own), the state token limit ``--max-seq-length`` (``serve
--chain-max-seq-length``) and the state form ``--chain-state`` (``serve --chain-state``),
each by default the encoder's own as the server serves it (the untrained encoder: 128
tokens, entity states; a version: what its checkpoint records). JSON keys: ``max_hops``,
``max_seq_length``, ``chain_state`` (null: each encoder's own), ``c5_untrained``,
``c5_end`` (the last
promoted version; the untrained encoder when none was), ``c5_per_version``,
``pairs_paid`` (the store's spend account), ``ledger_paid`` (rewards the ledger paid),
``drift_rescored`` (the drift check's fresh re-scores: paid, never in the ledger),
``judge_answered`` (pairs the judge server answered), ``promotions``,
``test_questions``, ``rounds``, ``seconds``, ``peak_rss_mb`` (this process's peak: the
server and the stand-in judge; the learner runs as its own process, ``tttembed loop
--chain ... --once``, as deployed) and ``learner_peak_rss_mb`` (the learner process's
peak RSS, the largest of the rounds; goal <= 2 GB).

Goal: the last promoted version >= untrained + 10 C@5 points on 2Wiki test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TTTEMBED_THREADS", "1")
K = 5


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True,
                   help="a folder shaped like ../shared/data/2wikimultihopqa")
    p.add_argument("--budget", type=int, default=4000, help="judge pairs in all")
    p.add_argument("--json", type=Path, required=True, help="where the results are written")
    p.add_argument("--rounds", type=int, default=2,
                   help="traffic rounds, each followed by one learning cycle")
    p.add_argument("--train-questions", type=int, default=0, help="train questions asked as traffic (0: all)")
    p.add_argument("--min-queries", type=int, default=20,
                   help="held-out questions the promotion check needs at least")
    p.add_argument("--noise", type=float, default=0.15,
                   help="the stand-in judge's noise (0.15 as in the soak)")
    p.add_argument("--seed", type=int, default=0,
                   help="the stand-in judge's noise seed (another seed: another draw)")
    p.add_argument("--work", type=Path, default=None,
                   help="keep the run's folder here (default: a temporary one)")
    p.add_argument("--max-hops", type=int, default=0,
                   help="the chain steps T every search asks for (0: the served encoder's)")
    p.add_argument("--max-seq-length", type=int, default=None,
                   help="the served state's token limit (serve --chain-max-seq-length; "
                        "default each encoder's own: 128 untrained, a version's record)")
    p.add_argument("--chain-state", default=None, choices=("text", "entities"),
                   help="the served state form (serve --chain-state; default each "
                        "encoder's own: entities untrained, a version's record)")
    return p.parse_args(argv)


def judge_folder(data: Path, chains: list[Any], work: Path) -> Path:
    """The judge's view: the corpus, the train questions and their chains as labels."""
    out = work / "judge"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    if not (out / "corpus.jsonl").exists():
        os.symlink((data / "corpus.jsonl").resolve(), out / "corpus.jsonl")
    (out / "queries.jsonl").write_text("".join(
        json.dumps({"_id": c.qid, "text": c.question}) + "\n" for c in chains))
    (out / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{c.qid}\t{d}\t1\n" for c in chains for d in c.chain))
    return out


@contextmanager
def judge_server(folder: Path, noise: float, count: Path, seed: int = 0):
    spec = importlib.util.spec_from_file_location("rerank_server",
                                                  ROOT / "examples" / "rerank_server.py")
    assert spec is not None and spec.loader is not None
    rerank = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rerank)
    server = ThreadingHTTPServer(("127.0.0.1", 0), rerank.handler(
        rerank.Judge(folder, noise, seed, ("train",)), rerank.Drill(0.0, count)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving(app: Any):
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


def c5(index: Any, task: Any, path: Path | None, chains: list[Any],
       served: tuple[int, int | None, str | None] = (0, None, None)) -> float:
    """C@5 of the gold chains under the greedy chain of the encoder at ``path`` (None:
    untrained), at the served T (``served[0]``; 0: the encoder's own), state token limit
    and form (``served[1:]``; None: the encoder's own, as the server serves it)."""
    from tttembed.chain.checkpoint import default_steps, load_encoder, state_settings
    from tttembed.chain.online import chain_run
    from tttembed.chain.states import StateTexts, TokenBudget

    hops, limit, form = served
    own = state_settings(path, limit, form)
    enc = load_encoder(path, max_seq_length=own.max_seq_length, index=index)
    texts = StateTexts([c.question for c in chains], task.state_passages(own.form),
                       budget=TokenBudget.for_model(enc.model, own.max_seq_length))
    run = chain_run(len(chains), texts, enc.encode, index.search,
                    steps=hops or default_steps(path), keep=K)
    ids = index.doc_ids
    done = [set(c.chain) <= {ids[int(r)] for r in row[:K] if r >= 0}
            for c, row in zip(chains, run.ranking)]
    return round(100.0 * sum(done) / max(len(done), 1), 2)


def learn_once(args: argparse.Namespace, work: Path, judge_url: str
               ) -> tuple[dict[str, Any], float]:
    """One learning cycle as a deployment runs it: ``tttembed loop --chain ... --once``
    in a process of its own. Its record (the learner's status beside the chain registry)
    and its peak RSS (MB: the largest of this benchmark's finished child processes, and
    the learner is its only one)."""
    import resource
    import subprocess

    from tttembed.loop.status import read_status

    cmd = [sys.executable, "-m", "tttembed", "loop", "--registry", str(work / "states"),
           "--index", str(work / "idx"), "--chain", str(work / "chain"),
           "--judge", f"rerank:labels@{judge_url}", "--judge-budget", str(args.budget),
           "--judge-rpm", "1000000", "--learn-every", str(10**9),
           "--min-queries", str(args.min_queries), "--corpus", str(args.data), "--once"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TTTEMBED_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the chain learner exited {done.returncode}: "
                         + " ".join(done.stderr.split())[-1500:])
    status = read_status(work / "chain")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return (dict(status.last_cycle) if status is not None else {}), round(peak, 1)


def paid_so_far(work: Path) -> int:
    """The store's spend account: every judge pair paid so far."""
    from tttembed.loop.open import open_store

    store = open_store(None, work / "states")
    try:
        return sum(store.spent().values())
    finally:
        store.close()


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import httpx

    from tttembed.chain.setup import load
    from tttembed.data.chains import load_multihop
    from tttembed.embed.base import DEFAULT_EMBEDDER
    from tttembed.registry.open import open_registry
    from tttembed.serve import create_app

    t0 = time.monotonic()
    loaded = load(args.data, "test", work / "idx")
    index, tests = loaded.index, loaded.task.chains
    task = loaded.task
    _, train = load_multihop(args.data, "train")
    train = train[:args.train_questions] if args.train_questions else train
    shared = {c.question for c in train} & {c.question for c in tests}
    if shared:
        raise SystemExit(f"error: --data {args.data}: {len(shared)} train questions are test "
                         "questions too (the held-out check would read what it learned "
                         "from); split the folder by text (benchmarks/split_by_text.py)")
    open_registry(work / "chain", create=True, index={
        "kind": "chain", "identity": index.identity,
        "corpus_fingerprint": index.manifest.get("corpus_fingerprint") or "",
        "base": DEFAULT_EMBEDDER})
    judge_data = judge_folder(args.data, train, work)
    count = work / "judge-pairs.txt"
    served = (args.max_hops, args.max_seq_length, args.chain_state)
    ask = {"max_hops": args.max_hops} if args.max_hops else {}
    out: dict[str, Any] = {"c5_untrained": c5(index, task, None, tests, served),
                           "max_hops": args.max_hops, "max_seq_length": args.max_seq_length,
                           "chain_state": args.chain_state,
                           "seed": args.seed,
                           "test_questions": len(tests), "train_questions": len(train),
                           "budget": args.budget, "rounds": args.rounds, "per_round": []}
    print(f"untrained C@5 on {len(tests)} test questions: {out['c5_untrained']}", flush=True)
    with judge_server(judge_data, args.noise, count, args.seed) as judge_url:
        for r in range(args.rounds):
            app = create_app(index=str(work / "idx"), chain=str(work / "chain"),
                             registry=str(work / "states"), corpus=str(args.data),
                             chain_max_seq_length=args.max_seq_length,
                             chain_state=args.chain_state)
            with serving(app) as url, httpx.Client(timeout=120) as http:
                for c in train:
                    got = http.post(f"{url}/v1/chain/search", json={"question": c.question, **ask})
                    got.raise_for_status()
            cycle, peak = learn_once(args, work, judge_url)
            out["learner_peak_rss_mb"] = max(out.get("learner_peak_rss_mb", 0.0), peak)
            spent = paid_so_far(work)
            row = {"round": r + 1, "version": cycle.get("version"),
                   "promoted": bool(cycle.get("promoted")), "reason": cycle.get("reason"),
                   "pairs_paid": spent, "learner_rss_mb": peak,
                   "seconds": round(time.monotonic() - t0, 1)}
            out["per_round"].append(row)
            print(json.dumps(row), flush=True)
    return finish(out, work, (index, task, tests, served), count, t0)


def finish(out: dict[str, Any], work: Path, test: tuple[Any, Any, list[Any], Any],
           count: Path, t0: float) -> dict[str, Any]:
    from tttembed.loop.open import open_store
    from tttembed.registry.chain import FOLDER
    from tttembed.registry.open import open_registry

    reg = open_registry(work / "chain")
    index, task, tests, served = test
    per: dict[str, Any] = {}
    for v in reg.versions():
        per[v.name] = {"c5": c5(index, task, Path(v.path) / FOLDER, tests, served),
                       "promoted": v.promoted, "reason": v.manifest.get("reason")}
    promoted = [v.name for v in reg.versions() if v.promoted]
    store = open_store(None, work / "states")
    try:
        spent = store.spent()
        out["pairs_paid"] = sum(spent.values())
        out["drift_rescored"] = int(spent.get("drift", 0))
        out["ledger_paid"] = sum(int(r.paid) for r in store.rewards(trusted_only=False))
    finally:
        store.close()
    out["judge_answered"] = sum(int(x) for x in count.read_text().split()) \
        if count.exists() else 0
    out["c5_per_version"] = per
    out["promotions"] = promoted
    out["c5_end"] = per[promoted[-1]]["c5"] if promoted else out["c5_untrained"]
    out["gain"] = round(out["c5_end"] - out["c5_untrained"], 2)
    out["goal_met"] = out["gain"] >= 10.0
    out["seconds"] = round(time.monotonic() - t0, 1)
    import resource

    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def check_args(args: argparse.Namespace) -> str:
    """What is wrong with the command line, as one line with the fix ('' when nothing)."""
    data = args.data
    if not data.is_dir():
        return f"--data {data}: no such folder (give one shaped like ../shared/data/2wikimultihopqa)"
    missing = [n for n in ("corpus.jsonl", "chains_test.jsonl", "chains_train.jsonl")
               if not (data / n).is_file()]
    if missing:
        return (f"--data {data}: no {' or '.join(missing)}; give a folder shaped like "
                "../shared/data/2wikimultihopqa")
    if args.budget < 1 or args.rounds < 1 or args.min_queries < 2:
        return "--budget and --rounds must be >= 1 and --min-queries >= 2"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    bad = check_args(args)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    import torch

    from tttembed.cli._common import quiet_libraries

    quiet_libraries()  # no screens of the tokenizer's "longer than the maximum" warning
    torch.set_num_threads(1)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        out = measure(args, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-chain-loop-") as tmp:
            out = measure(args, Path(tmp))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'version':<10}{'C@5':>8}  promoted")
    print(f"{'untrained':<10}{out['c5_untrained']:>8.2f}")
    for name, v in out["c5_per_version"].items():
        print(f"{name:<10}{v['c5']:>8.2f}  {v['promoted']}")
    print(f"closing note: C@5 untrained {out['c5_untrained']:.2f} -> last promoted "
          f"{out['c5_end']:.2f} ({out['gain']:+.2f}; goal +10: "
          f"{'met' if out['goal_met'] else 'missed'}); judge pairs paid {out['pairs_paid']} "
          f"(ledger {out['ledger_paid']}, drift re-scores {out['drift_rescored']}, judge "
          f"answered {out['judge_answered']}) of "
          f"{out['budget']}; {out['seconds']:.0f} s; peak RSS {out['peak_rss_mb']:.0f} MB "
          f"(the server and judge; the learner process {out.get('learner_peak_rss_mb', 0):.0f} MB, "
          f"goal <= 2048)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
