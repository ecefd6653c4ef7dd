"""Chain encoder versions with the `tttembed states` commands: added (a chain registry made
for the checkpoint's index), listed, shown, diffed, promoted and rolled back; an encoder
trained against another index or base model refused with the reason; a server started with
``--chain REGISTRY`` serves the promoted version and follows promotions."""

# ruff: noqa: F811  (the fixtures imported from the chain and serve tests)
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.serve.conftest import running
from tests.serve.test_chain_routes import chain_app, chain_setup, offline  # noqa: F401
from tttembed.cli import app as cli

runner = CliRunner()


def states(*args: str) -> Any:
    return runner.invoke(cli, ["states", *map(str, args)], catch_exceptions=False)


def edited(src: Path, dest: Path, **changes: Any) -> Path:
    """A copy of checkpoint ``src`` whose manifest says ``changes`` (``base`` goes to the
    config)."""
    shutil.copytree(src, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    for key, value in changes.items():
        if key == "base":
            manifest["config"]["base"] = value
        else:
            manifest[key] = value
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_chain_versions_go_through_the_states_commands(gold_checkpoint, tmp_path):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "chain-reg"
    res = states("add", reg, ckpt)
    assert res.exit_code == 0, res.output
    assert "as v1, not promoted" in res.output
    second = edited(ckpt, tmp_path / "second", epochs_done=2)
    assert states("add", reg, second).exit_code == 0
    listed = states("list", reg)
    assert "chain encoder, gold, T=3" in listed.output and "v2" in listed.output
    shown = json.loads(states("show", reg, "v1", "--json").stdout)
    assert shown["kind"] == "chain" and shown["base"] and shown["steps"] == 3
    assert (reg / "versions" / "v1" / "chain" / "adapter").is_dir()
    assert not (reg / "versions" / "v1" / "chain" / "optimizer.safetensors").exists()
    diff = states("diff", reg, "v1", "v2")
    assert "epochs_done: 1 -> 2" in diff.output, diff.output
    assert states("promote", reg, "v2").exit_code == 0
    assert states("rollback", reg).output.strip().endswith("serving raw vectors")
    assert states("promote", reg, "v1").exit_code == 0
    assert json.loads(states("list", reg, "--json").stdout)["served"] == "v1"


@pytest.mark.parametrize(("change", "reason"), [
    ({"index_embedder": "st:another-model"}, "the passage index's embedder"),
    ({"corpus_fingerprint": "f" * 64}, "the passage index's corpus"),
    ({"base": "st:another-base"}, "the base model"),
])
def test_an_encoder_for_another_index_or_base_model_is_refused(gold_checkpoint, tmp_path,
                                                               change, reason):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "chain-reg"
    assert states("add", reg, ckpt).exit_code == 0
    res = states("add", reg, edited(ckpt, tmp_path / "other", **change))
    assert res.exit_code == 1
    message = " ".join(res.output.split())
    assert reason in message and "cannot be added" in message
    assert [v["version"] for v in json.loads(states("list", reg, "--json").stdout)
            ["versions"]] == ["v1"]


def test_a_chain_encoder_is_refused_by_a_state_registry(gold_checkpoint, tmp_path):
    from tttembed.registry.base import index_record
    from tttembed.registry.open import open_registry

    ckpt, _ = gold_checkpoint
    manifest = json.loads((ckpt / "manifest.json").read_text())
    idx = type("I", (), {"identity": manifest["index_embedder"], "path": "idx",
                         "manifest": {"corpus_fingerprint": manifest["corpus_fingerprint"]}})
    open_registry(tmp_path / "states-reg", create=True, index=index_record(idx))
    res = states("add", tmp_path / "states-reg", ckpt)
    assert res.exit_code == 1 and "holds learned states" in res.output


def test_a_server_serves_and_follows_the_promoted_chain_version(
        gold_checkpoint, chain_setup, minilm, tmp_path):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "chain-reg"
    assert states("add", reg, ckpt).exit_code == 0
    assert states("add", reg, edited(ckpt, tmp_path / "b", epochs_done=2)).exit_code == 0
    assert states("promote", reg, "v1").exit_code == 0
    want = offline(chain_setup, tmp_path / "run.jsonl", "--encoder", str(ckpt))
    from tests.chain.conftest import CHAINS

    app = chain_app(chain_setup, minilm, chain=str(reg), registry_poll_s=0.1)
    with running(app) as url:
        def ask(question: str) -> dict[str, Any]:
            r = httpx.post(f"{url}/v1/chain/search", json={"question": question,
                                                           "top_k": 12}, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        for qid, question, _ in CHAINS:  # the trained encoder, as chain search runs it
            got = ask(question)
            assert got["version"] == "v1" and got["encoder"] == str(reg)
            assert [(d["id"], d["score"]) for d in got["data"]] == want[qid]
        health = httpx.get(f"{url}/healthz").json()
        # the states the checkpoint was trained on (its record: 48-token text)
        assert health["chain"] == {"encoder": str(reg), "version": "v1", "steps": 3,
                                   "max_seq_length": 48, "state": "text", "error": None}
        assert states("promote", reg, "v2").exit_code == 0
        deadline = time.monotonic() + 20
        while ask(CHAINS[0][1])["version"] != "v2":
            assert time.monotonic() < deadline, "the promotion did not reach the server"
            time.sleep(0.1)
        assert states("rollback", reg).exit_code == 0   # back to v1
        while ask(CHAINS[0][1])["version"] != "v1":
            assert time.monotonic() < deadline + 20
            time.sleep(0.1)


def test_an_unknown_version_or_a_state_registry_is_refused_at_start(
        gold_checkpoint, chain_setup, minilm, tmp_path):
    from tttembed.core.errors import ConfigError

    ckpt, _ = gold_checkpoint
    reg = tmp_path / "chain-reg"
    assert states("add", reg, ckpt).exit_code == 0
    with pytest.raises(ConfigError, match="has no version 'v9'"):
        chain_app(chain_setup, minilm, chain=f"{reg}@v9")
    with pytest.raises(ConfigError, match="not base, a checkpoint folder or a registry"):
        chain_app(chain_setup, minilm, chain=str(tmp_path / "nothing"))
    pinned = chain_app(chain_setup, minilm, chain=f"{reg}@v1")
    assert pinned.state.service.chain.source.current.version == "v1"


def test_a_promoted_version_that_cannot_be_served_keeps_the_last_one(
        gold_checkpoint, chain_setup, minilm, tmp_path):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "chain-reg"
    assert states("add", reg, ckpt).exit_code == 0
    assert states("add", reg, edited(ckpt, tmp_path / "b", epochs_done=2)).exit_code == 0
    assert states("promote", reg, "v1").exit_code == 0
    (reg / "versions" / "v2" / "chain" / "manifest.json").unlink()  # damaged on disk
    app = chain_app(chain_setup, minilm, chain=str(reg), registry_poll_s=0.1)
    with running(app) as url:
        from tttembed.registry.open import open_registry

        open_registry(reg).promote("v2", by="test")  # unchecked: the servers must refuse
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/healthz").json()["status"] != "degraded":
            assert time.monotonic() < deadline, "the refusal was never reported"
            time.sleep(0.1)
        health = httpx.get(f"{url}/healthz").json()["chain"]
        assert health["version"] == "v1" and "chain encoder files are missing" in \
            health["error"]
        r = httpx.post(f"{url}/v1/chain/search", json={"question": "q"}, timeout=60)
        assert r.status_code == 200 and r.json()["version"] == "v1"
