"""Trust round 6 (issue 77): the benchmark scripts a user runs by hand refuse bad inputs
at the start with one line that names the path and the fix, and never touch their source.
The scripts are loaded in this process and their ``main`` called with the argv a user
would type."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_module(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module (benchmarks/ on sys.path, as when a script runs)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def beir(folder: Path, n: int = 6) -> Path:
    """A small BEIR folder: n judged questions, a corpus of n passages."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"question number {i}"}) + "\n" for i in range(n)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(n)))
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) + "\n" for i in range(n)))
    return folder


def refused(capsys, argv: list[str], code: int, *words: str) -> str:
    """main(argv) exits ``code`` with one error line holding ``words``; that line."""
    split_by_text = bench_module("split_by_text")
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(split_by_text.main(argv))
    assert exc.value.code == code
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Traceback" not in err and all(w in err for w in words), err
    return err


def test_split_by_text_refuses_its_source_as_output_and_keeps_the_corpus(tmp_path, capsys):
    """split_by_text.py DIR DIR exits 2 naming the folder; DIR/corpus.jsonl is still the
    corpus (it was a link to itself), and so is every other file of the source."""
    src = beir(tmp_path / "src")
    before = {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    refused(capsys, [str(src), str(src)], 2, str(src), "source")
    refused(capsys, [str(src), str(tmp_path)], 2, "source")  # a folder above the source
    assert not (src / "corpus.jsonl").is_symlink()
    assert {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("case", ["missing", "no-queries", "output-is-a-file"])
def test_split_by_text_refuses_a_bad_path_in_one_line(tmp_path, capsys, case):
    """A source that does not exist or holds no queries.jsonl, and an output that is a
    file, exit 2 with one line naming the path (they were tracebacks)."""
    src, out = beir(tmp_path / "src"), tmp_path / "out"
    if case == "missing":
        src = tmp_path / "nowhere"
    elif case == "no-queries":
        (src / "queries.jsonl").unlink()
    else:
        out.write_text("a file")
    line = refused(capsys, [str(src), str(out)], 2,
                   str(out if case == "output-is-a-file" else src))
    assert "queries.jsonl" in line or case != "no-queries"


@pytest.mark.parametrize("empty", ["queries", "qrels"])
def test_split_by_text_refuses_a_source_with_nothing_judged(tmp_path, capsys, empty):
    """A source with no queries or no qrels exits 1 saying nothing is judged, and writes
    nothing (it wrote an empty split with rc 0)."""
    src, out = beir(tmp_path / "src"), tmp_path / "out"
    if empty == "queries":
        (src / "queries.jsonl").write_text("")
    else:
        (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    refused(capsys, [str(src), str(out)], 1, str(src), "judged")
    assert not out.exists()


def test_split_by_text_overwrites_a_folder_only_when_asked(tmp_path, capsys):
    """An output folder with something in it is refused unless --overwrite; with it, the
    split is rewritten; a fresh or empty folder needs nothing (as split() is called)."""
    split_by_text = bench_module("split_by_text")
    src, out = beir(tmp_path / "src"), tmp_path / "out"
    assert split_by_text.main([str(src), str(out)]) == 0
    first = (out / "qrels" / "test.tsv").read_text()
    refused(capsys, [str(src), str(out)], 2, str(out), "--overwrite")
    (out / "qrels" / "test.tsv").write_text("stale")
    assert split_by_text.main([str(src), str(out), "--overwrite"]) == 0
    assert (out / "qrels" / "test.tsv").read_text() == first
    assert (out / "corpus.jsonl").is_symlink()
    (tmp_path / "empty").mkdir()
    assert sum(split_by_text.split(src, tmp_path / "empty", 0.5).values()) == 6
    assert sum(split_by_text.split(src, tmp_path / "fresh" / "x", 0.5).values()) == 6
