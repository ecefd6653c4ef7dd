"""The closed-loop guide's section "Closing the loop from LangChain / LlamaIndex" runs as
written: its ``tttembed serve`` line (a real process with a registry and the learner; only
the port moved) on the demo's index, then its Python block (in this environment, which
has both frameworks): the retrievers' documents carry search ids, the clicks and the label
are stored, and the learner's next cycle counts both clicks."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loop.test_replicas import _env, _get, _port, _wait
from tests.test_readme import MODULES, _block

pytest.importorskip("uvicorn")
pytest.importorskip("tttembed.integrations.langchain")
pytest.importorskip("tttembed.integrations.llamaindex")


def test_the_frameworks_section_runs_as_written(tmp_path, minilm):
    import tttembed.api as tt
    from tttembed.demo import export_demo

    # the README's Usage: the demo (its modules subset, as the README test runs it) indexed
    export_demo(tmp_path / "data" / "stdlib-docs", modules=MODULES.split(","))
    tt.index_corpus(tmp_path / "data" / "stdlib-docs", tmp_path / "idx" / "stdlib-docs",
                    embedder=minilm)
    port = _port()
    serve_line = _block("frameworks-serve").strip().replace("--port 8000", f"--port {port}")
    assert serve_line.startswith("tttembed serve ") and "\n" not in serve_line
    code = _block("frameworks").replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}"
    env = _env(tmp_path)
    log = tmp_path / "serve.log"
    tttembed = str(Path(sys.executable).parent / "tttembed")
    with open(log, "wb") as out:
        serve = subprocess.Popen([tttembed, *shlex.split(serve_line)[1:]], cwd=tmp_path,
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait("the server", lambda: _get(f"{url}/healthz"), [serve], [log])
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
        lines = run.stdout.splitlines()
        assert len(lines) == 4, run.stdout
        assert "'search_id'" not in lines[0] and len(lines[0].rsplit(" ", 1)[1]) == 32
        assert all("'stored': 1" in ln for ln in lines[1:]), run.stdout
        started = time.monotonic()
        loop = _wait("the learner's cycle that reads both clicks",
                     lambda: (lambda s: s if s["learner_clicks"].get("read", 0) >= 2
                              and s["cycles"] >= 1 else None)(_get(f"{url}/v1/loop")),
                     [serve], [log], limit=240)
        assert loop["feedback_received"] == 1, loop
        assert time.monotonic() - started < 240
    finally:
        serve.terminate()
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait(10)
