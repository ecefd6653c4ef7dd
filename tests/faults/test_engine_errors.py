"""Vector-database engine failures reach a user as one line with the path and a fix: a
Milvus Lite database or Qdrant folder another process holds, damaged engine files, a path
that is not a database. Real engines, real second processes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.faults.conftest import ROOT, env, one_line_error, run_cli

QUERIES = "q1\thow do plants make energy from sunlight\nq2\twhy do tides happen\n"
CORPUS = [{"_id": f"d{i}", "title": t, "text": f"{t} explained in a short text."}
          for i, t in enumerate(["photosynthesis", "tides", "volcanoes", "rivers"])]


def _need(engine: str) -> None:
    for module in {"milvus": ("pymilvus", "milvus_lite"), "qdrant": ("qdrant_client",)}[engine]:
        pytest.importorskip(module, reason=f"{module} not installed")


@pytest.fixture()
def built(tmp_path, request):
    """(engine, spec, store path, query file) of a collection index built by the CLI."""
    engine = request.param
    _need(engine)
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    queries = tmp_path / "queries.tsv"
    queries.write_text(QUERIES)
    name = f"t{uuid.uuid4().hex[:8]}"
    where = tmp_path / ("m.db" if engine == "milvus" else "qdrant")
    spec = f"{engine}:{where}/{name}"
    proc = run_cli("index", str(data), "--out", spec)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return engine, spec, where, queries


def _search(spec: str, queries: Path):
    return run_cli("search", str(queries), "--index", spec, "--top-k", "2")


@pytest.mark.parametrize("built", ["milvus", "qdrant"], indirect=True)
def test_a_store_held_by_another_process_is_one_line(built):
    """While one process holds a Milvus Lite database / Qdrant local folder, a second one
    gets one line naming the path, the one-process rule and what to do."""
    engine, spec, where, queries = built
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from tttembed.index.store import load_index;"
         f"load_index({spec!r}); print('open', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        line = one_line_error(_search(spec, queries))
    finally:
        holder.kill()
        holder.wait()
    assert "another process has the" in line and str(where.resolve()) in line, line
    assert "server" in line
    proc = _search(spec, queries)  # released: it opens again
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("built", ["milvus", "qdrant"], indirect=True)
def test_damaged_engine_files_are_one_line_with_a_rebuild_fix(built):
    """A damaged engine file (Milvus Lite's collection schema.json, Qdrant's meta.json,
    Qdrant's collection storage.sqlite) is one line naming it and how to rebuild; the
    SQLite hint never points at a Qdrant folder."""
    engine, spec, where, queries = built
    if engine == "milvus":
        schema = next(where.glob("collections/*/schema.json"))
        schema.write_text("{garbage")
        line = one_line_error(_search(spec, queries))
        assert "Milvus Lite database" in line and "damaged" in line and "--out milvus:" in line
        return
    meta = where / "meta.json"
    good = meta.read_text()
    meta.write_text("{not json")
    line = one_line_error(_search(spec, queries))
    assert "meta.json" in line and "damaged" in line and "--out qdrant:" in line, line
    meta.write_text(good)
    for storage in where.glob("collection/*/storage.sqlite"):
        storage.write_bytes(b"this is not a database" * 100)
    line = one_line_error(_search(spec, queries))
    assert "damaged" in line and ".recover" not in line, line


def test_a_milvus_path_that_is_a_file_is_one_line(tmp_path):
    """``milvus:FILE/NAME`` where FILE is an ordinary file: one line saying so."""
    _need("milvus")
    bogus = tmp_path / "notes.db"
    bogus.write_text("not a database")
    (tmp_path / "q.tsv").write_text(QUERIES)
    line = one_line_error(_search(f"milvus:{bogus}/c", tmp_path / "q.tsv"))
    assert f"{bogus} is a file, not a Milvus Lite database" in line, line
