"""What ``bench_soak.py`` starts: the task (:func:`prepare_task`: the BEIR folder, or a
subset of ``--docs`` documents, its index built once into the work folder), wrk's data
file (:func:`write_lua_data`), and the processes (:class:`Stack`: PostgreSQL, the judge,
two replicas, the learner, each restartable; :func:`start_wrk`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _loop_support import CHILDREN
from _support import ROOT, cli, free_port, log_tail, src_env, wait_healthy

K = 10
LUA = Path(__file__).resolve().parent / "soak.lua"
JUDGE = ROOT / "examples" / "rerank_server.py"


# -- the task -----------------------------------------------------------------------------
@dataclass
class Task:
    folder: Path                     # the BEIR folder the index and the judge read
    name: str                        # the task searched
    index: Path
    questions: dict[str, str]        # qid -> text, every judged question
    qrels: dict[str, dict[str, int]]  # every split's judgments
    stream: list[str]                # qids of the traffic's questions (train, else test)
    test: list[str]                  # qids of the judged test questions (the replay)
    head: list[str] = field(default_factory=list)  # the stream's 100 most asked
    splits: tuple[str, ...] = ("test",)  # the qrels files the judge answers from
    stream_split: str = "test"       # the split the traffic is drawn from (train, else test)

    @property
    def audit(self) -> str:
        """The learner's ``--audit``: the labels of the questions the traffic asks, the
        population the judge is paid for (an audit of the test questions alone would pass
        a judge that guesses on the train questions the traffic asks)."""
        return f"qrels:{self.folder / 'qrels' / (self.stream_split + '.tsv')}"


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, grade = line.split("\t")[:3]
        out.setdefault(qid, {})[did] = int(grade)
    return out


def _subset(data: Path, docs: int, out: Path) -> Path:
    """A BEIR folder of ``docs`` documents: every judged document first, then the
    corpus in order; the judgments of the kept documents."""
    folder = out / f"{data.name}-{docs}" / data.name
    if (folder / "corpus.jsonl").exists():
        return folder
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    qrels = {s.stem: read_qrels(s) for s in (data / "qrels").glob("*.tsv")}
    judged = {d for q in qrels.values() for g in q.values() for d in g}
    rows = [line for line in (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    first = [r for r in rows if json.loads(r)["_id"] in judged]
    rest = [r for r in rows if json.loads(r)["_id"] not in judged]
    kept = (first + rest)[:docs]
    ids = {json.loads(r)["_id"] for r in kept}
    (folder / "corpus.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text((data / "queries.jsonl").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    for split, q in qrels.items():
        lines = ["query-id\tcorpus-id\tscore"] + [
            f"{qid}\t{d}\t{g}" for qid, gs in q.items() for d, g in gs.items() if d in ids]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def prepare_task(data: Path, docs: int, work_dir: Path, index: Path | None = None) -> Task:
    """The task of ``data`` (``docs`` > 0: a subset of that many documents) and its
    index (``index``, or built once into ``work_dir``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    folder = _subset(data, docs, work_dir) if docs > 0 else data
    if index is None:
        index = _index(folder, work_dir / f"index-{data.name}-{docs or 'all'}", work_dir)
    splits = tuple(s for s in ("train", "test") if (folder / "qrels" / f"{s}.tsv").exists())
    qrels_by = {s: read_qrels(folder / "qrels" / f"{s}.tsv") for s in splits}
    questions = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions[row["_id"]] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    for q in qrels_by.values():
        for qid, gs in q.items():
            qrels.setdefault(qid, {}).update(gs)
    test = sorted(q for q, gs in qrels_by.get("test", {}).items()
                  if q in questions and any(g > 0 for g in gs.values()))
    stream_split = "train" if "train" in qrels_by else "test"
    stream = sorted(q for q, gs in qrels_by.get(stream_split, {}).items()
                    if q in questions and any(g > 0 for g in gs.values()))
    return Task(folder=folder, name=data.name, index=index,
                questions={q: questions[q] for q in qrels if q in questions}, qrels=qrels,
                stream=stream, test=test, splits=splits, stream_split=stream_split)


def _index(folder: Path, index: Path, work_dir: Path) -> Path:
    """The folder's index at ``index``, built once (reused by later runs)."""
    if (index / "manifest.json").exists() or (index / "CURRENT").exists():
        return index
    tmp = index.with_name(index.name + ".tmp")
    print(f"indexing {folder} into {index} (once; reused by later runs)", flush=True)
    subprocess.run(cli("index", str(folder), "-o", str(tmp), "--quiet", "--overwrite"),
                   check=True, env=src_env(TTTEMBED_CACHE_DIR=str(work_dir / "cache")))
    os.replace(tmp, index)
    return index


def _lua_string(text: str) -> str:
    level = "=" * 4
    while f"]{level}]" in text:
        level += "="
    return f"[{level}[{text}]{level}]"


def write_lua_data(task: Task, path: Path, seed: int) -> None:
    """wrk's data file: a search body per stream question, its relevant documents, and
    the cumulative Zipf(1) weights over the questions in a seeded order."""
    order = list(task.stream)
    random.Random(seed).shuffle(order)
    task.head = order[:100]
    weights = [1.0 / (r + 1) for r in range(len(order))]
    total, acc, cdf = sum(weights), 0.0, []
    for w in weights:
        acc += w / total
        cdf.append(acc)
    cdf[-1] = 1.0
    bodies, rels = [], []
    for qid in order:
        body = json.dumps({"query": task.questions[qid], "task": task.name, "k": K})
        bodies.append(_lua_string(body))
        rel = ", ".join(f'[{json.dumps(d)}] = true' for d, g in task.qrels[qid].items() if g > 0)
        rels.append("{" + rel + "}")
    path.write_text("return {\n bodies = {" + ",\n".join(bodies) + "},\n rel = {"
                    + ",\n".join(rels) + "},\n cdf = {" + ", ".join(f"{c:.9f}" for c in cdf)
                    + "}\n}\n", encoding="utf-8")


# -- processes ----------------------------------------------------------------------------
@dataclass
class Proc:
    """One started process, restartable on the same port."""

    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str]
    url: str = ""
    proc: subprocess.Popen | None = None
    pids: list[int] = field(default_factory=list)  # every pid it had

    def start(self, wait: bool = True) -> None:
        self.proc = CHILDREN.start(self.cmd, self.log, self.env)
        self.pids.append(self.proc.pid)
        if wait and self.url:
            wait_healthy(self.url, self.proc, 600, self.log)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is not None:
            CHILDREN.stop(self.proc)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None


class Ports:
    """The TCP ports the soak's servers listen on: any free one, or (``--ports LO-HI``)
    the next free one of that range; a range with none free is a one-line error."""

    def __init__(self, spec: str = "") -> None:
        self.range: range | None = None
        if spec:
            lo, _, hi = spec.partition("-")
            try:
                self.range = range(int(lo), int(hi or lo) + 1)
            except ValueError:
                self.range = None
            if self.range is None or not self.range or self.range.start < 1 \
                    or self.range.stop > 65536:
                raise SystemExit(f"error: --ports {spec}: give a range LO-HI of TCP ports "
                                 "(1-65535), e.g. --ports 20000-20100")
        self.used: set[int] = set()

    def take(self) -> int:
        if self.range is None:
            return free_port()
        import socket

        for port in self.range:
            if port in self.used:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.used.add(port)
            return port
        raise SystemExit(f"error: --ports {self.range.start}-{self.range.stop - 1}: no free "
                         "port left in the range (the soak needs 4: PostgreSQL, the judge, "
                         "two replicas); give a wider range")


def judge_proc(task: Task, work: Path, env: dict[str, str], port: int,
               fail_for: float = 0.0) -> Proc:
    cmd = [sys.executable, str(JUDGE), str(task.folder), "--port", str(port), "--splits",
           ",".join(task.splits), "--count-file", str(work / "judge-pairs.txt")]
    if fail_for > 0:
        cmd += ["--fail-for", f"{fail_for:.1f}"]
    return Proc("judge", cmd, work / "judge.log", env)


def wait_port(port: int, timeout: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


@dataclass
class Stack:
    """PostgreSQL, the judge, replicas a and b, the learner (``tttembed loop``)."""

    task: Task
    work: Path
    db: Any                     # tests.pg.PgServer
    budget: int
    learn_every: int
    rpm: float
    settle_s: float
    judge_port: int = 0
    procs: dict[str, Proc] = field(default_factory=dict)
    #: ``--retain D --keep-versions K`` for the replicas and the learner (empty: defaults)
    retention: tuple[str, ...] = ()
    ports: Ports = field(default_factory=Ports)

    @property
    def url(self) -> str:
        return str(self.db.url)

    def env(self) -> dict[str, str]:
        return src_env(TTTEMBED_CACHE_DIR=str(self.work / "cache"), TTTEMBED_THREADS="1",
                       TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")

    def replica(self, name: str) -> Proc:
        port = self.ports.take()
        cmd = cli("serve", "--index", str(self.task.index), "--registry", self.url,
                  "--registry-cache", str(self.work / f"cache-{name}"), "--port", str(port),
                  "--log-level", "warning", "--click-settle-s", f"{self.settle_s:g}",
                  *self.retention)
        return Proc(f"replica-{name}", cmd, self.work / f"replica-{name}.log",
                    self.env(), url=f"http://127.0.0.1:{port}")

    def learner(self) -> Proc:
        cmd = cli("loop", "--registry", self.url, "--index", str(self.task.index),
                  "--judge", f"rerank:soak-labels@http://127.0.0.1:{self.judge_port}/v1",
                  "--corpus", str(self.task.folder), "--audit", self.task.audit,
                  "--judge-budget", str(self.budget), "--judge-rpm", f"{self.rpm:g}",
                  "--learn-every", str(self.learn_every), "--click-settle-s",
                  f"{self.settle_s:g}", *self.retention)
        env = {**self.env(), "TTTEMBED_CACHE_DIR": str(self.work / "learner-cache")}
        return Proc("learner", cmd, self.work / "learner.log", env)

    def start(self) -> None:
        self.judge_port = self.ports.take()
        self.procs["judge"] = judge_proc(self.task, self.work, self.env(), self.judge_port)
        self.procs["judge"].start()
        wait_port(self.judge_port)
        for name in ("a", "b"):
            self.procs[name] = self.replica(name)
            self.procs[name].start(wait=False)
        for name in ("a", "b"):
            assert self.procs[name].proc is not None
            wait_healthy(self.procs[name].url, self.procs[name].proc, 600,
                         self.procs[name].log)
        self.procs["learner"] = self.learner()
        self.procs["learner"].start()

    def restart_judge(self, fail_for: float) -> None:
        old = self.procs["judge"]
        new = judge_proc(self.task, self.work, self.env(), self.judge_port, fail_for)
        new.pids = old.pids
        self.procs["judge"] = new
        new.start()

    def stop_all(self) -> None:
        for p in reversed(list(self.procs.values())):
            p.stop()

    def check_alive(self) -> list[str]:
        return [f"{p.name} exited ({p.proc.returncode}): {log_tail(p.log, 3)}"
                for p in self.procs.values() if p.proc is not None and p.proc.poll() is not None]


def start_wrk(url: str, threads: int, seconds: float, log: Path, data: Path, rate: float,
              seed: int, replica: str, stop_at: float = 0.0) -> subprocess.Popen:
    """wrk on ``url`` with one connection per thread and the soak script; ``rate``
    searches/s for this process (0: unpaced)."""
    env = {**os.environ, "SOAK_DATA": str(data), "SOAK_LOG": str(log), "SOAK_RATE": str(rate),
           "SOAK_THREADS": str(threads), "SOAK_SEED": str(seed), "SOAK_REPLICA": replica,
           "SOAK_STOP_AT": str(stop_at) if stop_at else ""}
    cmd = ["wrk", "-t", str(threads), "-c", str(threads), "-d", f"{int(seconds)}s",
           "--timeout", "60s", "-s", str(LUA), url]
    # in CHILDREN (its own process group): every exit path of the benchmark stops it
    return CHILDREN.start(cmd, log.with_suffix(".out"), env)
