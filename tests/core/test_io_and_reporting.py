from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tttembed
from tttembed import reporting
from tttembed.core import io
from tttembed.core.io import clean, versions, write_json, write_text
from tttembed.reporting import (
    fmt,
    markdown_table,
    save_figure,
    write_results,
)


def test_import_is_light():
    code = ("import sys, tttembed.reporting; "
            "print(sorted(m for m in ('matplotlib', 'torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_write_json_is_atomic_and_replaces(tmp_path):
    path = tmp_path / "sub" / "results.json"
    assert write_json(path, {"a": 1}) == path
    write_json(path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = write_text(tmp_path / "report.md", "old\n")

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(io.os, "replace", boom)
    with pytest.raises(OSError):
        write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_clean_nan_numpy_paths_and_unknown_objects(tmp_path):
    obj = {"nan": float("nan"), "inf": -math.inf, "f32": np.float32(0.5),
           "i64": np.int64(7), "b": np.bool_(True), "arr": np.array([1.0, np.nan]),
           "mat": np.arange(4).reshape(2, 2), "path": tmp_path / "x", "t": (1, 2),
           "s": {3, 1}, 1: "int key", None: "none key", "obj": object}
    got = clean(obj)
    assert got["nan"] is None and got["inf"] is None
    assert got["f32"] == 0.5 and type(got["f32"]) is float
    assert got["i64"] == 7 and type(got["i64"]) is int
    assert got["b"] is True
    assert got["arr"] == [1.0, None] and got["mat"] == [[0, 1], [2, 3]]
    assert got["path"] == str(tmp_path / "x") and got["t"] == [1, 2] and got["s"] == [1, 3]
    assert got["1"] == "int key" and got["null"] == "none key"
    assert got["obj"] == str(object)
    path = write_json(tmp_path / "r.json", obj)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["nan"] is None
    assert json.loads(path.read_text()) == got


def test_write_json_indent_none_is_one_line(tmp_path):
    text = write_json(tmp_path / "pq.json", {"a": {"b": 1}}, indent=None).read_text()
    assert text == '{"a": {"b": 1}}\n'


def test_versions_always_has_tttembed_and_python_and_skips_absent():
    v = versions(("numpy", "no-such-distribution-xyz"))
    assert list(v)[:2] == ["tttembed", "python"]
    assert v["tttembed"] == tttembed.__version__
    assert v["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert v["numpy"] == np.__version__
    assert "no-such-distribution-xyz" not in v
    assert set(versions(())) == {"tttembed", "python"}


def test_write_results_envelope(tmp_path):
    path = write_results(tmp_path / "results.json", {"k": 3}, {"x": float("nan")},
                         distributions=("numpy",))
    data = json.loads(path.read_text())
    assert set(data) == {"config", "versions", "created", "results"}
    assert data["config"] == {"k": 3} and data["results"] == {"x": None}
    assert set(data["versions"]) == {"tttembed", "python", "numpy"}


def test_fmt():
    assert fmt(None) == "–" and fmt(float("nan")) == "–" and fmt(np.float64("inf")) == "–"
    assert fmt(0.12345) == "0.12" and fmt(np.float32(0.5), 3) == "0.500"
    assert fmt(3) == "3" and fmt("a") == "a"


def test_markdown_table_shape_alignment_and_escaping():
    md = markdown_table(["name", "score", "n", "mixed"],
                        [["a|b", 0.5, 3, "x"], ["c\nd", None, np.int64(4), 1.0]])
    lines = md.splitlines()
    assert md.endswith("\n") and len(lines) == 4
    assert lines[0] == "| name | score | n | mixed |"
    assert lines[1] == "|---|---:|---:|---|"
    assert lines[2] == "| a\\|b | 0.50 | 3 | x |"
    assert lines[3] == "| c d | – | 4 | 1.00 |"
    # every line has the same number of (unescaped) column separators
    assert {line.replace("\\|", "").count("|") for line in lines} == {5}


def test_markdown_table_empty_and_bad_rows():
    assert markdown_table(["a", "b"], []) == "| a | b |\n|---|---|\n"
    with pytest.raises(ValueError, match="2 cells for 3 headers"):
        markdown_table(["a", "b", "c"], [[1, 2]])


def _png(path: Path) -> bool:
    data = path.read_bytes()
    return len(data) > 100 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_figure_closes_the_figure(tmp_path):
    plt = reporting.pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    path = save_figure(plt, fig, tmp_path / "f.png", dpi=50)
    assert _png(path) and not plt.fignum_exists(fig.number)
