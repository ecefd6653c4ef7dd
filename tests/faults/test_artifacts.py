"""Fault injection on artifacts: index versions and locks (class 2), reports (3), states
(4), chain checkpoints (5), disk full (9). Every fault runs in a real process: SIGKILL at
a named point (``TTTEMBED_FAULT``), two writers at once, a reader loop during rebuilds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.faults.conftest import ROOT, env, killed, one_line_error, run_cli, run_py
from tttembed.core.errors import ConfigError, DataError
from tttembed.core.io import POINTER, atomic_directory, resolve_version, write_text
from tttembed.index.store import load_index

# --- helpers ------------------------------------------------------------------------------

#: Python source run in child processes: write generation ``g`` of a small index at ``out``
#: (``n = 20 + g`` documents whose ids carry ``g``, recorded in the manifest too).
WRITE_GEN = textwrap.dedent("""
    import numpy as np
    from tttembed.index.store import write_index

    def write_gen(out, g, overwrite=True):
        n = 20 + g
        rng = np.random.default_rng(g)
        v = rng.normal(size=(n, 8)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        write_index(out, [f"g{g}-d{i}" for i in range(n)], v, embedder_identity="fake:hash",
                    embedder_spec="fake:hash", corpus_fingerprint=f"fp{g}",
                    overwrite=overwrite, extra={"generation": g})
""")


def write_gen(out: Path, g: int, overwrite: bool = True) -> None:
    ns: dict = {}
    exec(WRITE_GEN, ns)
    ns["write_gen"](out, g, overwrite)


def check_gen(out: Path) -> int:
    """Open the index at ``out``; assert manifest, ids, vectors and FAISS are one version."""
    h = load_index(out)
    g = h.manifest["generation"]
    assert h.manifest["n_docs"] == len(h.doc_ids) == len(h.vectors) == h.faiss_index.ntotal
    assert len(h.doc_ids) == 20 + g and all(d.startswith(f"g{g}-") for d in h.doc_ids)
    assert h.manifest["corpus_fingerprint"] == f"fp{g}"
    return int(g)


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- class 2: index readers and writers ---------------------------------------------------

def test_reader_loop_during_rebuilds_never_mixes_versions(tmp_path):
    """A reader opening the index while another process rebuilds it 12 times always gets
    one whole version (manifest, ids, vectors and FAISS agree), never an error."""
    out = tmp_path / "idx"
    write_gen(out, 0)
    ack = tmp_path / "ack"
    ack.write_text("0")
    writer = subprocess.Popen([sys.executable, "-c", WRITE_GEN + textwrap.dedent(f"""
        import time
        from pathlib import Path
        for g in range(1, 13):
            while int(Path({str(ack)!r}).read_text() or 0) < g - 1:  # reader saw g - 1
                time.sleep(0.001)
            write_gen({str(out)!r}, g)
    """)], cwd=ROOT, env=env())
    seen, reads, errors = set(), 0, []
    try:
        while writer.poll() is None:
            try:
                g = check_gen(out)
            except (AssertionError, DataError, OSError) as exc:
                errors.append(repr(exc))
                continue
            seen.add(g)
            reads += 1
            write_text(ack, str(max(seen)))
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0
    assert not errors, errors[:3]
    assert check_gen(out) == 12 and seen >= set(range(12)), sorted(seen)
    assert entries(out) == [POINTER, resolve_version(out).name]


def test_two_concurrent_index_writers_one_wins(tmp_path):
    """Two writers of one index folder at once: the first wins, the second fails at once
    with a ConfigError naming the folder; a later writer without --overwrite is refused."""
    out, go = tmp_path / "idx", tmp_path / "go"
    slow = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tests.fakes import HashEmbedder, tiny_corpus
        from tttembed.index.store import build_index

        class Slow(HashEmbedder):
            def encode(self, texts, kind="document", progress=None):
                Path({str(tmp_path / 'encoding')!r}).touch()
                while not Path({str(go)!r}).exists():
                    time.sleep(0.01)
                return super().encode(texts, kind)

        build_index(tiny_corpus(30), Slow(dim=8), {str(out)!r})
        print("built")
    """)
    first = subprocess.Popen([sys.executable, "-c", slow], cwd=ROOT, env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not (tmp_path / "encoding").exists():
            assert first.poll() is None, first.communicate()
        second = run_py(WRITE_GEN + f"write_gen({str(out)!r}, 1)")
    finally:
        go.touch()
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0 and "built" in stdout, stderr
    assert second.returncode == 1
    assert f"ConfigError: {out} is being written by another process" in second.stderr
    assert load_index(out).manifest["n_docs"] == 30
    third = run_py(WRITE_GEN + f"write_gen({str(out)!r}, 2, overwrite=False)")
    assert third.returncode == 1 and "already exists; pass --overwrite" in third.stderr


@pytest.mark.parametrize("point,survivor", [("version:written", 0), ("version:renamed", 0),
                                            ("version:switched", 1)])
def test_kill_during_an_index_swap_leaves_a_readable_index(tmp_path, point, survivor):
    """SIGKILL at each step of a rebuild's swap leaves a whole old or new index (never
    nothing, never a mix); the next write removes the leftovers and the stale lock."""
    out = tmp_path / "idx"
    write_gen(out, 0)
    proc = run_py(WRITE_GEN + f"write_gen({str(out)!r}, 1)", fault=point)
    assert killed(proc), proc.stderr
    assert check_gen(out) == survivor
    assert len(entries(out)) > 2  # the killed writer's leftovers
    write_gen(out, 2)
    assert check_gen(out) == 2 and entries(out) == [POINTER, resolve_version(out).name]
    assert entries(tmp_path) == ["idx"]


def test_kill_during_a_first_build_leaves_no_index_and_no_obstacle(tmp_path):
    """SIGKILL during the first build of an index: opening it is a clear DataError, and the
    next build (without --overwrite) succeeds and cleans up."""
    out = tmp_path / "idx"
    proc = run_py(WRITE_GEN + f"write_gen({str(out)!r}, 0, overwrite=False)",
                  fault="version:written")
    assert killed(proc)
    with pytest.raises(DataError, match="not a tttembed index"):
        load_index(out)
    write_gen(out, 3, overwrite=False)
    assert check_gen(out) == 3 and entries(out) == [POINTER, resolve_version(out).name]


def test_kill_while_converting_a_flat_index_keeps_it_readable(tmp_path):
    """An index of the old flat layout, rebuilt with a SIGKILL after the pointer switch,
    opens as the new version; the next write removes the old flat files."""
    import shutil

    write_gen(tmp_path / "v", 0)
    out = tmp_path / "flat"
    shutil.copytree(resolve_version(tmp_path / "v"), out)
    assert check_gen(out) == 0
    proc = run_py(WRITE_GEN + f"write_gen({str(out)!r}, 1)", fault="version:switched")
    assert killed(proc) and check_gen(out) == 1
    write_gen(out, 2)
    assert check_gen(out) == 2 and entries(out) == [POINTER, resolve_version(out).name]


# --- class 3: reports -----------------------------------------------------------------------

REPORT = textwrap.dedent("""
    from tests.evaluation.test_report import RAW, _pq, _results
    from tttembed.evaluation.report import summarise, write_report

    def report(out, note):
        s = summarise(_results(), _pq(RAW), n_resamples=50)
        result = {"format": "tttembed-eval/1",
                  "config": {"protocols": ["fixed"], "analyses": [], "objective": "kd",
                             "few_queries": 50, "tasks": ["a", "b"]},
                  "versions": {"tttembed": "x"}, "embedder_identity": note,
                  "tasks": [{"name": "a", "queries": 3, "few_queries": True},
                            {"name": "b", "queries": 1, "few_queries": True}],
                  "raw": {}, "sections": [{"scorer": "bm25", "scorer_identity": "bm25",
                                           "notes": [note], **s}],
                  "counts": {"scorer_paid": 0}, "timings_s": {"total": 1.0}}
        return write_report(result, out, plots=False)
""")


def _report(out: Path, note: str, fault: str | None = None, pre: str = ""):
    return run_py(pre + REPORT + f"report({str(out)!r}, {note!r})", fault=fault)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("point,survivor", [("swap:written", "old"), ("swap:switched", "new")])
def test_kill_during_eval_report_leaves_a_whole_report(tmp_path, point, survivor):
    """SIGKILL while `eval --report` swaps its folder in leaves the whole old or the whole
    new report (results.json, per_query.json and report.md of one run); the next write
    removes the leftovers."""
    out = tmp_path / "rep"
    assert _report(out, "old").returncode == 0
    old = _snapshot(out)
    proc = _report(out, "new", fault=point)
    assert killed(proc), proc.stderr
    now = _snapshot(out)
    assert sorted(now) == ["per_query.json", "report.md", "results.json"]
    if survivor == "old":
        assert now == old
    else:
        results = json.loads(now["results.json"])
        assert results["embedder_identity"] == "new" and b"new" in now["report.md"]
    assert _report(out, "third").returncode == 0
    assert entries(tmp_path) == ["rep"]


def test_kill_between_the_renames_of_a_report_swap_is_repaired(tmp_path):
    """Where the kernel cannot swap two folders in one step, a SIGKILL between the two
    renames leaves the old report aside; the next writer (or a resume) puts it back."""
    out = tmp_path / "rep"
    assert _report(out, "old").returncode == 0
    old = _snapshot(out)
    no_exchange = "import tttembed.core.io as io; io._exchange = lambda a, b: False\n"
    proc = _report(out, "new", fault="swap:moved-aside", pre=no_exchange)
    assert killed(proc) and not out.exists()
    from tttembed.core.io import recover_directory

    recover_directory(out)
    assert _snapshot(out) == old and entries(tmp_path) == ["rep"]


def test_ctrl_c_while_writing_a_report_leaves_the_old_one(tmp_path):
    """Ctrl-C (KeyboardInterrupt) in the middle of writing a report: the old report stays
    byte for byte and no temporary folder is left."""
    out = tmp_path / "rep"
    assert _report(out, "old").returncode == 0
    old = _snapshot(out)
    interrupt = ("import tttembed.evaluation.report as r\n"
                 "def stop(*a, **k): raise KeyboardInterrupt\n"
                 "r.markdown = stop\n")
    proc = _report(out, "new", pre=interrupt)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert _snapshot(out) == old and entries(tmp_path) == ["rep"]


def test_two_report_writers_one_gets_a_clear_error(tmp_path):
    """A second writer of a report folder being written gets a ConfigError naming it."""
    out = tmp_path / "rep"
    with atomic_directory(out) as tmp:
        (tmp / "report.md").write_text("first")
        proc = _report(out, "second")
    assert proc.returncode == 1 and f"{out} is being written by another process" in proc.stderr
    assert (out / "report.md").read_text() == "first"


# --- class 4: states --------------------------------------------------------------------------

def test_search_with_a_nan_state_is_a_one_line_error_naming_the_file(tmp_path):
    """`tttembed search --state` with a state whose row is NaN exits 1 with one line naming
    the state file, never an empty run with exit 0."""
    from tests.adapt.test_state import ID, _tamper, make_state
    from tttembed.adapt.state import save_state
    from tttembed.index.store import write_index

    path = save_state(tmp_path / "v.npz", make_state("global", ("*",), d=384))
    _tamper(path, vectors=np.full((1, 384), np.nan))
    v = np.random.default_rng(0).normal(size=(5, 384)).astype(np.float32)
    write_index(tmp_path / "idx", [f"d{i}" for i in range(5)],
                v / np.linalg.norm(v, axis=1, keepdims=True), embedder_identity=ID,
                embedder_spec=ID, corpus_fingerprint="fp")
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    proc = run_cli("search", str(tmp_path / "q.jsonl"), "--index", str(tmp_path / "idx"),
                   "--state", str(path), "--out", str(tmp_path / "run.trec"))
    line = one_line_error(proc)
    assert str(path) in line and "not finite" in line, line
    assert not (tmp_path / "run.trec").exists()


# --- class 5: chain checkpoints ---------------------------------------------------------------

CHECKPOINT = textwrap.dedent("""
    from tttembed.core.io import atomic_directory, write_manifest

    def checkpoint(out, epochs, fp="fp1"):
        with atomic_directory(out) as tmp:
            (tmp / "adapter").mkdir()
            (tmp / "adapter" / "weights").write_text(f"epoch {epochs}")
            write_manifest(tmp, {"format": "tttembed-chain-encoder", "config": {"lr": 1},
                                 "n_questions": 4, "questions_digest": "q1",
                                 "index_embedder": "fake:hash", "corpus_fingerprint": fp,
                                 "epochs_done": epochs,
                                 "history": [{"epoch": e + 1} for e in range(epochs)]})
""")
EXPECT = {"config": {"lr": 1}, "n_questions": 4, "questions_digest": "q1",
          "index_embedder": "fake:hash", "corpus_fingerprint": "fp1"}


@pytest.mark.parametrize("point,no_exchange", [("swap:written", False), ("swap:switched", False),
                                               ("swap:moved-aside", True)])
def test_kill_during_a_checkpoint_swap_loses_no_finished_epoch(tmp_path, point, no_exchange):
    """SIGKILL while epoch 3's checkpoint is swapped in: resuming finds epoch 2's (or 3's)
    checkpoint whole, never nothing (a swap cut between two renames is repaired)."""
    from tttembed.chain.checkpoint import resume_point

    out = tmp_path / "ck"
    assert run_py(CHECKPOINT + f"checkpoint({str(out)!r}, 2)").returncode == 0
    pre = "import tttembed.core.io as io; io._exchange = lambda a, b: False\n" if no_exchange else ""
    proc = run_py(pre + CHECKPOINT + f"checkpoint({str(out)!r}, 3)", fault=point)
    assert killed(proc)
    done, history = resume_point(out, EXPECT, overwrite=False)
    assert done == (3 if point == "swap:switched" else 2) and len(history) == done
    assert (out / "adapter" / "weights").read_text() == f"epoch {done}"
    assert entries(tmp_path) == ["ck"]


@pytest.mark.parametrize("key,value,label", [
    ("corpus_fingerprint", "fp2", "another corpus"),
    ("questions_digest", "q2", "another questions"),
    ("index_embedder", "st:other", "another index embedder"),
    ("config", {"lr": 2}, "another configuration"),
])
def test_resume_on_other_data_is_refused_naming_what_differs(tmp_path, key, value, label):
    """`chain train D2 --out ck` on a checkpoint of D1 (other corpus, questions, index or
    config) is a ConfigError naming what differs and --overwrite; never a silent resume."""
    from tttembed.chain.checkpoint import resume_point

    out = tmp_path / "ck"
    assert run_py(CHECKPOINT + f"checkpoint({str(out)!r}, 1)").returncode == 0
    with pytest.raises(ConfigError, match=f"trained with {label}.*--overwrite"):
        resume_point(out, {**EXPECT, key: value}, overwrite=False)
    assert resume_point(out, {**EXPECT, key: value}, overwrite=True) == (0, [])


# --- class 9: disk full -------------------------------------------------------------------

def _fill_code(target: Path) -> str:
    return WRITE_GEN + textwrap.dedent(f"""
        import numpy as np
        from tests.adapt.test_state import make_state
        from tttembed.adapt.state import save_state
        from tttembed.index.store import write_index
        from pathlib import Path
        t = Path({str(target)!r})
        n = 4000   # 4000 x 128 float32 = 2 MB of vectors: more than the tmpfs holds
        v = np.random.default_rng(0).normal(size=(n, 128)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        what = __import__("sys").argv[1]
        if what == "index":
            write_index(t / "idx", [f"d{{i}}" for i in range(n)], v, embedder_identity="x",
                        embedder_spec="x", corpus_fingerprint="f", overwrite=True)
        else:
            save_state(t / "v.npz", make_state(keys=tuple(f"k{{i}}" for i in range(n)), d=128))
    """)


@pytest.mark.parametrize("what", ["index", "state"])
def test_disk_full_leaves_the_old_artifact_and_no_partial_file(tmpfs, what):
    """On a full 2 MiB tmpfs, writing an index or a state fails with ENOSPC (OSError) and
    leaves the old index / the old .npz + .json pair and no partial or temporary file."""
    if what == "index":
        write_gen(tmpfs / "idx", 0)
    else:
        from tests.adapt.test_state import make_state
        from tttembed.adapt.state import save_state

        save_state(tmpfs / "v.npz", make_state())
    before = {p.relative_to(tmpfs): p.read_bytes() for p in tmpfs.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "-c", _fill_code(tmpfs), what], capture_output=True,
                          text=True, cwd=ROOT, env=env(), timeout=180)
    assert proc.returncode == 1 and "No space left on device" in proc.stderr, proc.stderr[-500:]
    after = {p.relative_to(tmpfs): p.read_bytes() for p in tmpfs.rglob("*") if p.is_file()}
    assert after == before
    if what == "index":
        assert check_gen(tmpfs / "idx") == 0



@pytest.mark.parametrize("name,cut", [("index.faiss", 60), ("doc_ids.json", 5),
                                      ("vectors.npy", 20), ("manifest.json", 0),
                                      (POINTER, 3)])
def test_a_truncated_index_file_is_a_data_error_naming_it(tmp_path, name, cut):
    """A truncated file of an index (FAISS, ids, vectors, manifest, version pointer) is a
    DataError that names the file, never a traceback or a silently wrong index."""
    out = tmp_path / "idx"
    write_gen(out, 0)
    target = out / POINTER if name == POINTER else resolve_version(out) / name
    target.write_bytes(target.read_bytes()[:cut])
    with pytest.raises(DataError) as info:
        load_index(out)
    assert str(target) in str(info.value) or (name == "manifest.json" and "manifest" in str(info.value))
