"""benchmarks/split_by_text.py: a BEIR folder's judged questions split into train and
test by their text, deterministically, no text on both sides (issue 65 item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "split_by_text.py"


def _folder(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    texts = [f"argument number {i} about things" for i in range(40)]
    texts += ["a repeated argument", "a  repeated   argument", "a repeated argument"]
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)) +
        json.dumps({"_id": "unjudged", "text": "never judged"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(len(texts))))
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": "x"}) + "\n" for i in range(43)))
    return root


def _sides(out: Path) -> dict[str, set[str]]:
    texts = {json.loads(line)["_id"]: json.loads(line)["text"]
             for line in (out / "queries.jsonl").read_text().splitlines()}
    sides = {}
    for name in ("train", "test"):
        qids = {line.split("\t")[0] for line in
                (out / "qrels" / f"{name}.tsv").read_text().splitlines()[1:]}
        sides[name] = {" ".join(texts[q].split()) for q in qids}
    return sides


def test_split_keeps_each_text_on_one_side_and_is_deterministic(tmp_path: Path) -> None:
    src = _folder(tmp_path / "src")
    runs = []
    for name in ("a", "b"):
        done = subprocess.run([sys.executable, str(SCRIPT), str(src), str(tmp_path / name),
                               "--test-share", "0.3"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "train and" in done.stdout
        runs.append(tmp_path / name)
    sides = _sides(runs[0])
    assert sides["train"] and sides["test"]
    assert not sides["train"] & sides["test"]  # "a repeated argument" on one side only
    assert sum(len(s) for s in sides.values()) == 41  # 43 judged, 3 of them one text
    assert (runs[0] / "qrels" / "test.tsv").read_text() == \
        (runs[1] / "qrels" / "test.tsv").read_text()
    assert "unjudged" not in (runs[0] / "queries.jsonl").read_text()
    assert (runs[0] / "corpus.jsonl").is_symlink()


def test_help_runs() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "--test-share" in done.stdout
