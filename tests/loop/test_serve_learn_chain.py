# ruff: noqa: F811  (the fixtures imported from the chain tests)
"""``serve --learn --chain CHAIN_REGISTRY`` learns chain versions: the chain guide's
``chain-serve-learn`` command run as written (bash, the venv's ``tttembed``; only the
ports change, and ``--judge-budget`` is appended lower, so that the two learners
compete for it, and ``--judge-rpm`` higher, so that the test waits less), on the tiny multi-hop set with the chain tests' gold checkpoint as the
registry's unpromoted v1 and the stand-in judge of the chain learner's tests. Chain and
single searches are posted; the chain learner runs a cycle, the two learners together
pay within the one budget, the judge answered exactly what the store's account holds,
and after SIGTERM of the server no learner is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.loop.chain_traffic import answered, judge_server, questions, write_judged_dataset
from tests.loop.test_chain_learn_guide import _port
from tests.test_readme import _block

pytest.importorskip("uvicorn")
# a real `tttembed serve --learn` and its learners: about 70 s on two busy cores
pytestmark = [pytest.mark.process, pytest.mark.slow]

BUDGET = 150
#: single searches (texts no chain question has: no pair is both learners')
SEARCHES = ("painter born in a fishing town", "college founded by an engineer",
            "bridges built in the capital")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait(what: str, check, proc: subprocess.Popen, log: Path, limit: float = 240):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited: {log.read_text()[-3000:]}"
        try:
            got = check()
        except (OSError, ValueError, httpx.HTTPError):
            got = None
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {limit:.0f} s\n{log.read_text()[-3000:]}")


def _serve_line() -> tuple[str, str]:
    """(the ``D=`` line of the chain-learn block, the guide's serve --learn line)."""
    sets = [ln.strip() for ln in _block("chain-learn").splitlines()
            if ln.strip().startswith("D=")]
    [line] = [ln.strip() for ln in _block("chain-serve-learn").splitlines() if ln.strip()]
    assert line.startswith("tttembed serve") and "--learn" in line and "--chain" in line
    return " ; ".join(sets), line


@pytest.fixture()
def world(gold_checkpoint, tmp_path):
    """The guide's layout in ``tmp_path``: the data, its index, a chain registry holding
    the gold checkpoint (v1, not promoted: the server serves the untrained encoder)."""
    from tttembed.chain.setup import load
    from tttembed.registry.open import open_for

    data = tmp_path / "data" / "2wikimultihopqa"
    write_judged_dataset(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(tmp_path / "cache"))
        load(data, "test", tmp_path / "idx" / "2wiki")
    ckpt, _ = gold_checkpoint
    open_for(str(tmp_path / "reg" / "chain"), ckpt).add(ckpt, by="user")
    return tmp_path


def test_serve_learn_with_a_chain_registry_learns_chain_versions(world):
    from tttembed.loop.open import open_store
    from tttembed.registry.open import open_registry
    from tttembed.score.ledger import Ledger

    sets, line = _serve_line()
    port, log = _port(), world / "serve.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "TTTEMBED_THREADS": "1", "TTTEMBED_CACHE_DIR": str(world / "cache")}
    with judge_server(world / "data" / "2wikimultihopqa", world / "pairs.txt") as (judge, _):
        line = line.replace("8000", str(port)).replace(
            "http://127.0.0.1:8001/v1", judge) + f" --judge-budget {BUDGET} --judge-rpm 60000"
        with open(log, "wb") as out:
            proc = subprocess.Popen(["bash", "-c", f"{sets} ; exec {line}"], cwd=world,
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait("the server", lambda: httpx.get(f"{url}/healthz").status_code == 200,
                  proc, log)
            learners = _wait("two learners", lambda: (lambda c: c if len(c) == 2 else None)(
                _children(proc.pid)), proc, log, 15)
            chain = [p for p in learners if "--chain" in _cmdline(p)]
            assert len(chain) == 1, [_cmdline(p) for p in learners]
            for q in SEARCHES:
                r = httpx.post(f"{url}/v1/search", json={"query": q}, timeout=60)
                assert r.status_code == 200, r.text
            for _, q, _ in questions():
                r = httpx.post(f"{url}/v1/chain/search", json={"question": q}, timeout=60)
                assert r.status_code == 200, r.text
            _wait("a chain version", lambda: "chain cycle: v2" in log.read_text(), proc, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        text = log.read_text()
        assert proc.returncode in (0, 128 + signal.SIGTERM), text[-3000:]
        assert not [p for p in learners if _alive(p)], text[-3000:]
        for pid in learners:
            assert f"learner (pid {pid}) stopped with its server" in text, text[-3000:]
        paid = answered(world / "pairs.txt")
    reg = open_registry(str(world / "reg" / "chain"))
    names = [v.name for v in reg.versions()]
    assert "chain cycle: v2" in text and "v2" in names, (names, text[-3000:])
    store = open_store(None, str(world / "reg" / "states"))
    try:
        spent, rows = store.spent(), store.rewards(trusted_only=False)
    finally:
        store.close()
    total = sum(spent.values())
    # the judge answered exactly the pairs reserved in the one account, within the budget
    assert 0 < total <= BUDGET and paid == total, (spent, paid)
    # the served pairs and validation ones are rewards (the drift audit's re-scores not)
    stored = sum(r.paid for r in rows)
    assert stored == spent.get("judge", 0) + spent.get("validation", 0), (spent, stored)
    ledger = Ledger(world / "cache" / "ledger.sqlite")
    try:
        assert ledger.count() == stored      # each paid pair once in the ledger
    finally:
        ledger.close()
    keys = [(r.task, r.query, r.doc_id) for r in rows]
    assert len(keys) == len(set(keys))
    tasks = {r.task for r in rows if r.paid}
    assert "/chain" in tasks and len(tasks) == 2, tasks   # both learners paid
