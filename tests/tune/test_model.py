"""``tttembed pairs train``: a full fine-tune written as a model folder that ``index
--embedder st:FOLDER`` reads, with its manifest; the same triplets give the same model;
a folder trained again under the same path is a new embedder identity (the embedding
cache never serves the earlier weights' vectors); bad input is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed.cli import app
from tttembed.embed.st import SentenceTransformerEmbedder
from tttembed.tune.model import MANIFEST, read_tuned_manifest, triplets_digest
from tttembed.tune.pairs import Triplet

pytestmark = pytest.mark.model
runner = CliRunner()
ROWS = [Triplet(f"which {w} grows in the desert", f"the {w} survives dry sand and heat",
                f"the harbour {w} freezes in winter") for w in ("cactus", "agave", "yucca")]


def _file(tmp_path: Path, rows=ROWS) -> Path:
    path = tmp_path / "triplets.jsonl"
    path.write_text("".join(json.dumps(r.row()) + "\n" for r in rows))
    return path


def _train(*args: str):
    return runner.invoke(app, ["pairs", "train", *args, "--quiet"])


def test_a_trained_folder_embeds_as_an_st_spec_and_repeats_itself(tmp_path):
    trip = _file(tmp_path)
    r = _train(str(trip), "--out", str(tmp_path / "a"), "--batch-size", "2", "--lr", "1e-4")
    assert r.exit_code == 0, r.output
    assert "3 triplets (2 steps" in r.output and f"st:{tmp_path / 'a'}" in r.output
    manifest = read_tuned_manifest(tmp_path / "a")
    assert manifest["triplets"] == {"source": str(trip), "rows": 3,
                                    "sha256": triplets_digest(ROWS)}
    assert manifest["settings"]["lr"] == 1e-4 and manifest["settings"]["mode"] == "full"
    assert _train(str(trip), "--out", str(tmp_path / "b"), "--batch-size", "2", "--lr",
                  "1e-4").exit_code == 0
    a = SentenceTransformerEmbedder(str(tmp_path / "a"))
    b = SentenceTransformerEmbedder(str(tmp_path / "b"))
    base = SentenceTransformerEmbedder("bundled:all-MiniLM-L6-v2")
    texts = ["dry sand", "the harbour freezes"]
    np.testing.assert_array_equal(a.encode(texts), b.encode(texts))
    assert np.abs(a.encode(texts) - base.encode(texts)).max() > 1e-4  # it did learn


def test_a_folder_trained_again_is_another_identity(tmp_path):
    trip = _file(tmp_path)
    out = tmp_path / "m"
    assert _train(str(trip), "--out", str(out), "--epochs", "1").exit_code == 0
    first = SentenceTransformerEmbedder(str(out)).identity
    assert "tuned=" in first
    again = _train(str(trip), "--out", str(out), "--epochs", "2", "--overwrite")
    assert again.exit_code == 0, again.output
    assert SentenceTransformerEmbedder(str(out)).identity != first
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert "tuned=" not in SentenceTransformerEmbedder(str(plain)).identity


@pytest.mark.parametrize("case, fix", [
    ("exists", "already exists"),
    ("missing", "file not found"),
    ("not-triplets", "lacks the text of negative"),
    ("bad-epochs", "epochs"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, case, fix):
    trip = _file(tmp_path)
    out = tmp_path / "m"
    args = [str(trip), "--out", str(out)]
    if case == "exists":
        out.mkdir()
        (out / "config.json").write_text("{}")
    elif case == "missing":
        args[0] = str(tmp_path / "nope.jsonl")
    elif case == "not-triplets":
        trip.write_text(json.dumps({"anchor": "a", "positive": "b"}) + "\n")
    else:
        args += ["--epochs", "0"]
    r = _train(*args)
    assert r.exit_code in (1, 2), r.output
    assert fix in r.output.lower() or fix in r.output, r.output
    assert "Traceback" not in r.output
    if case != "exists":
        assert not out.exists()
    else:
        assert not (out / MANIFEST).exists()
