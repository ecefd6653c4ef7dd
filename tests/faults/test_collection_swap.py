"""A vector-database index is replaced whole or not at all: ``--overwrite`` of a
``milvus:`` / ``qdrant:`` index builds a new collection and switches the spec's alias to
it, so a writer killed (SIGKILL, a real process) at any point leaves the old index or the
new one, never none and never a mix."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.faults.conftest import killed, run_py

ENGINES = {"milvus": ("pymilvus", "milvus_lite"), "qdrant": ("qdrant_client",)}

WRITE = """
import json, sys
import numpy as np
import tttembed.index.collection as coll
from tttembed.index.store import write_index
spec, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
coll.WRITE_BATCH = 2
rng = np.random.default_rng(n)
v = rng.normal(size=(n, 8)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)
write_index(spec, [f"{tag}{i}" for i in range(n)], v, embedder_identity="st:fake",
            embedder_spec="st:fake", corpus_fingerprint=tag, overwrite=True)
"""

READ = """
import json, sys
from tttembed.core.backends import create
from tttembed.index.collection import STAGE
from tttembed.index.store import load_index
spec = sys.argv[1]
ix = load_index(spec)
store = create("index", spec)
builds = [c for c in store.collections() if c.startswith(store.collection + STAGE)]
print(json.dumps({"fp": ix.manifest["corpus_fingerprint"], "n": len(ix.doc_ids),
                  "first": ix.doc_ids[0], "hits": len(ix.search(ix.get_vectors([0]), 3)[1][0]),
                  "builds": len(builds)}))
"""


def _spec(engine: str, tmp_path) -> str:
    for module in ENGINES[engine]:
        pytest.importorskip(module, reason=f"{module} not installed")
    name = f"t{uuid.uuid4().hex[:10]}"
    return (f"milvus:{tmp_path}/m.db/{name}" if engine == "milvus"
            else f"qdrant:{tmp_path}/q/{name}")


def _write(spec: str, n: int, tag: str, fault: str | None = None):
    return run_py(WRITE.replace("sys.argv[1], int(sys.argv[2]), sys.argv[3]",
                                f"{spec!r}, {n}, {tag!r}"), fault=fault)


def _read(spec: str) -> dict:
    proc = run_py(READ.replace("sys.argv[1]", repr(spec)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_overwrite_killed_while_inserting_leaves_the_old_index(engine, tmp_path):
    """An --overwrite killed after its first batch leaves the old index searchable and
    unchanged; the next write drops the half-built collection and succeeds."""
    spec = _spec(engine, tmp_path)
    assert _write(spec, 6, "old").returncode == 0
    assert killed(_write(spec, 9, "new", fault="collection:inserted"))
    got = _read(spec)
    assert (got["fp"], got["n"], got["first"], got["hits"]) == ("old", 6, "old0", 3)
    assert _write(spec, 9, "new").returncode == 0
    got = _read(spec)
    assert (got["fp"], got["n"], got["builds"]) == ("new", 9, 1)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_overwrite_killed_after_its_switch_leaves_the_new_index(engine, tmp_path):
    """Killed after the alias switch (before the old collection is dropped): the new
    index is in force; the next write drops the orphaned old collection."""
    spec = _spec(engine, tmp_path)
    assert _write(spec, 6, "old").returncode == 0
    assert killed(_write(spec, 9, "new", fault="collection:switched"))
    got = _read(spec)
    assert (got["fp"], got["n"], got["builds"]) == ("new", 9, 2)
    assert _write(spec, 4, "third").returncode == 0
    got = _read(spec)
    assert (got["fp"], got["n"], got["builds"]) == ("third", 4, 1)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_collection_of_older_tttembed_is_converted_and_survives_a_kill(engine, tmp_path):
    """A collection written under the bare name (older tttembed) is converted to an alias
    on --overwrite; a kill between dropping it and making the alias leaves the complete
    new build, which the next open adopts."""
    spec = _spec(engine, tmp_path)
    legacy = WRITE.replace("coll.WRITE_BATCH = 2", """
def legacy(store, doc_ids, vectors, manifest, progress=None, texts=None):
    store.create(vectors.shape[1])  # the bare name, as before aliases
    store.insert(np.arange(len(doc_ids)), doc_ids, vectors)
    store.write_manifest(manifest)
    return store.spec
coll.write_collection = legacy""")
    proc = run_py(legacy.replace("sys.argv[1], int(sys.argv[2]), sys.argv[3]",
                                 f"{spec!r}, 5, 'old'"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _read(spec)["fp"] == "old" and _read(spec)["builds"] == 0
    assert killed(_write(spec, 7, "new", fault="collection:legacy-dropped"))
    got = _read(spec)
    assert (got["fp"], got["n"], got["builds"]) == ("new", 7, 1)
