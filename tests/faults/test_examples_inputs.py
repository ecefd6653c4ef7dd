"""The examples hold the product's error standard (issue 59): bad input to
``examples/rerank_server.py`` and ``examples/replay.py`` ends in one line on stderr with
the cause and the fix (exit 2), never a traceback and never a wrong culprit."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def folder(tmp_path) -> Path:
    """A one-question BEIR folder."""
    root = tmp_path / "docs"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "a cat"}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "cat?"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["--port", "99999"], ("--port 99999", "1-65535")),
    (["--port", "-5"], ("--port -5",)),
    (["--noise", "-1"], ("--noise -1", ">= 0")),
    (["--noise", "nan"], ("--noise nan",)),
])
def test_rerank_server_refuses_a_bad_port_or_noise_in_one_line(folder, capsys, args, words):
    assert _example("rerank_server").main([str(folder), *args]) == 2
    _one_line(capsys, *words)


def test_rerank_server_says_a_port_in_use(folder, capsys):
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as taken:
        port = taken.server_address[1]
        assert _example("rerank_server").main([str(folder), "--port", str(port)]) == 2
    _one_line(capsys, f"127.0.0.1:{port}", "--port")


class _NotTttembed(BaseHTTPRequestHandler):
    """A server that answers every request with JSON that is not tttembed's."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        data = json.dumps({"hello": "world"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST


@pytest.fixture
def other_server() -> Iterator[str]:
    with ThreadingHTTPServer(("127.0.0.1", 0), _NotTttembed) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


def test_replay_against_a_server_that_is_not_tttembed_says_so(folder, other_server, capsys):
    assert _example("replay").main([str(folder), "--url", other_server]) == 2
    _one_line(capsys, f"{other_server}/v1/search", "tttembed serve")


def test_replay_of_a_missing_folder_blames_the_folder_not_the_server(tmp_path, other_server,
                                                                     capsys):
    missing = tmp_path / "nowhere"
    assert _example("replay").main([str(missing), "--url", other_server]) == 2
    line = _one_line(capsys, str(missing), "BEIR folder")
    assert "start the server" not in line
