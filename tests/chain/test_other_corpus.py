"""A chain encoder trained on another corpus with the same embedder is refused at load,
everywhere, with the reason (its corpus fingerprint): `chain search --encoder`, `serve
--chain CKPT`, and `chain train --states-from`."""

# ruff: noqa: F811  (the fixtures imported from the chain and serve tests)
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_config,
    tiny_data,
    tiny_loaded,
)
from tests.serve.test_chain_routes import chain_app, chain_setup  # noqa: F401
from tttembed.core.errors import StateMismatch

runner = CliRunner()


def other_corpus(src: Path, dest: Path) -> Path:
    """A copy of checkpoint ``src`` that says it was trained against another corpus."""
    shutil.copytree(src, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["corpus_fingerprint"] = "f" * 64
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_chain_search_refuses_an_encoder_of_another_corpus(gold_checkpoint, chain_setup,
                                                           tmp_path):
    from tttembed.cli.chain import app

    ckpt = other_corpus(gold_checkpoint[0], tmp_path / "other")
    res = runner.invoke(app, ["search", str(chain_setup["data"]), "--index",
                              str(chain_setup["index"]), "--encoder", str(ckpt), "--quiet"])
    message = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "another corpus" in message and "ffffffffffff" in message
    assert "chain train" in message


def test_the_same_corpus_still_loads(gold_checkpoint, chain_setup):
    from tttembed.cli.chain import app

    res = runner.invoke(app, ["search", str(chain_setup["data"]), "--index",
                              str(chain_setup["index"]), "--encoder",
                              str(gold_checkpoint[0]), "--quiet"])
    assert res.exit_code == 0, res.output


def test_serve_refuses_an_encoder_of_another_corpus(gold_checkpoint, chain_setup, minilm,
                                                    tmp_path):
    ckpt = other_corpus(gold_checkpoint[0], tmp_path / "other")
    with pytest.raises(StateMismatch, match="another corpus"):
        chain_app(chain_setup, minilm, chain=str(ckpt))


def test_states_from_an_encoder_of_another_corpus_is_said(gold_checkpoint, tiny_loaded,
                                                          tmp_path):
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    ckpt = other_corpus(gold_checkpoint[0], tmp_path / "other")
    with pytest.raises(StateMismatch, match="--states-from .*another corpus"):
        train_chain(task, index, frozen_encode(emb), tiny_config(regime="on-policy"),
                    tmp_path / "op", states_from=ckpt)
    assert not (tmp_path / "op" / "manifest.json").exists()


def test_chain_eval_measures_transfer_and_records_it(gold_checkpoint, chain_setup, tmp_path):
    """An evaluation may measure transfer (the write-up's HotpotQA columns): the encoder
    of another corpus is evaluated, and the report's config names it."""
    from tttembed.chain.api import chain_eval

    ckpt = other_corpus(gold_checkpoint[0], tmp_path / "other")
    res = chain_eval(chain_setup["data"], tmp_path / "report", index=chain_setup["index"],
                     encoders={"gold": gold_checkpoint[0], "elsewhere": ckpt}, beam=1)
    assert "chain (elsewhere)" in res["systems"]
    config = json.loads((tmp_path / "report" / "results.json").read_text())["config"]
    assert config["transfer"] == ["elsewhere"]


def test_offline_and_served_chain_search_run_one_default_number_of_hops(
        gold_checkpoint, chain_setup, minilm):
    """`chain search` with no --steps runs the encoder's T, the hops a served chain
    search runs with no max_hops: 2 for the untrained encoder, the checkpoint's T."""
    from tttembed.chain.api import chain_search
    from tttembed.chain.online import DEFAULT_STEPS

    base = chain_search(chain_setup["data"], index=chain_setup["index"], max_seq_length=48)
    assert base.steps == DEFAULT_STEPS == 2
    app = chain_app(chain_setup, minilm)
    assert app.state.service.chain.source.current.steps == base.steps
    ckpt = gold_checkpoint[0]
    trained = chain_search(chain_setup["data"], index=chain_setup["index"], encoder=ckpt,
                           max_seq_length=48)
    assert trained.steps == json.loads((ckpt / "manifest.json").read_text())["steps"] == 3
    served = chain_app(chain_setup, minilm, chain=str(ckpt))
    assert served.state.service.chain.source.current.steps == trained.steps
    every = chain_search(chain_setup["data"], index=chain_setup["index"], steps=0,
                         max_seq_length=48)
    assert every.steps == 3   # --steps 0: the data's max hops
