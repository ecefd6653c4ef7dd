"""The closed-loop guide's commands run as written: the ``loop`` block's server (a real
``tttembed serve --learn`` process on the README's demo index; only the port is
changed) learns from replayed demo questions, and the ``states`` block's commands run
against the registry it made; every command in a virtual environment built by exactly
the install line the guide states (not the dev environment), so a missing extra fails."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.loop.test_replicas import _env, _get, _port, _post, _wait
from tests.test_readme import MODULES, ROOT, _block, install_line, page_venv

pytest.importorskip("uvicorn")


def _lines(marker: str) -> list[str]:
    text = _block(marker).replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("tttembed ")]


def _page_env(venv: Path, cwd: Path) -> dict[str, str]:
    """The page venv's environment: offline, one thread, no dev-tree PYTHONPATH."""
    env = {**_env(cwd), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1",
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _run(venv: Path, line: str, cwd: Path) -> None:
    words = shlex.split(line)
    if words[1:3] == ["demo", "--export"]:
        words += ["--modules", MODULES]
    r = subprocess.run([str(venv / "bin" / "tttembed"), *words[1:]], cwd=cwd,
                       env=_page_env(venv, cwd), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])


def test_the_closed_loop_guide_runs_as_written(tmp_path, monkeypatch):
    venv = page_venv(install_line(ROOT / "docs" / "guides" / "closed-loop.md"))
    monkeypatch.chdir(tmp_path)
    for line in ("tttembed demo --export data/stdlib-docs",
                 "tttembed index data/stdlib-docs --out idx/stdlib-docs"):
        _run(venv, line, tmp_path)
    (serve,) = _lines("loop")
    port = _port()
    args = shlex.split(serve.replace("--port 8000", f"--port {port}"))[1:]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    questions = [json.loads(ln)["text"] for ln in
                 Path("data/stdlib-docs/queries.jsonl").read_text().splitlines()][:12]
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(venv / "bin" / "tttembed"), *args], cwd=tmp_path,
                                env=_page_env(venv, tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait("the server", lambda: _get(f"{url}/healthz"), [proc], [log])
        for _ in range(2):  # head questions recur
            for q in questions:
                status, body = _post(f"{url}/v1/search", {"query": q, "task": "stdlib-docs"})
                assert status == 200 and body["data"][0]["search_id"], body
        status, fb = _post(f"{url}/v1/feedback", {"search_id": body["data"][0]["search_id"],
                                                  "doc_id": "json.dumps", "label": 1})
        assert status == 202, fb
        loop = _wait("a learning cycle", lambda: (lambda s: s if s["versions"] and s["idle"]
                                                  else None)(_get(f"{url}/v1/loop")),
                     [proc], [log], limit=300)
    finally:
        proc.terminate()
        proc.wait(60)
    assert loop["feedback_received"] == 1 and loop["pairs_judged"] > 0
    for line in _lines("states"):
        _run(venv, line, tmp_path)
    served = json.loads(Path("reg/stdlib-docs/served.json").read_text())
    assert [h["action"] for h in served["history"]][-2:] == ["promote", "rollback"]
