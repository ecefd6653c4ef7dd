"""Adding a chain encoder to a registry checks it as a damaged state is checked at add:
the same checkpoint twice is said and not added again; torn or pickle weights, a broken
adapter configuration and links inside the checkpoint are refused with the reason, and
nothing is added."""

# ruff: noqa: F811  (the fixtures imported from the chain tests)
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.serve.test_chain_routes import chain_setup  # noqa: F401,E402
from tttembed.cli import app as cli

runner = CliRunner()


def states(*args: Any) -> Any:
    return runner.invoke(cli, ["states", *map(str, args)], catch_exceptions=False)


def listed(reg: Path) -> list[str]:
    return [v["version"] for v in json.loads(states("list", reg, "--json").stdout)["versions"]]


def test_the_same_checkpoint_added_twice_is_said_and_not_added(gold_checkpoint, tmp_path):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "reg"
    assert "as v1" in states("add", reg, ckpt).output
    copy = shutil.copytree(ckpt, tmp_path / "copy")   # the same files from another folder
    for source in (ckpt, copy):
        res = states("add", reg, source)
        assert res.exit_code == 0, res.output
        assert "is already v1" in res.output and "nothing added" in res.output
    assert listed(reg) == ["v1"]


def _damaged(src: Path, dest: Path, how: str) -> Path:
    shutil.copytree(src, dest)
    adapter = dest / "adapter"
    if how == "truncated weights":
        blob = (adapter / "adapter_model.safetensors").read_bytes()
        (adapter / "adapter_model.safetensors").write_bytes(blob[:len(blob) // 2])
    elif how == "truncated config":
        text = (adapter / "adapter_config.json").read_text()
        (adapter / "adapter_config.json").write_text(text[:len(text) // 2])
    elif how == "pickle weights":
        (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    elif how == "a link to a file outside":
        outside = dest.parent / "secret.txt"
        outside.write_text("not the checkpoint's")
        (adapter / "notes.txt").symlink_to(outside)
    elif how == "a linked weights file":
        real = dest.parent / "weights.safetensors"
        (adapter / "adapter_model.safetensors").rename(real)
        (adapter / "adapter_model.safetensors").symlink_to(real)
    return dest


@pytest.mark.parametrize(("how", "reason"), [
    ("truncated weights", "adapter_model.safetensors is damaged"),
    ("truncated config", "adapter_config.json is not JSON"),
    ("pickle weights", "pickle weights"),
    ("a link to a file outside", "is a symbolic link"),
    ("a linked weights file", "is a symbolic link"),
])
def test_a_damaged_checkpoint_is_refused_at_add(gold_checkpoint, tmp_path, how, reason):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "reg"
    assert states("add", reg, ckpt).exit_code == 0
    bad = _damaged(ckpt, tmp_path / "bad", how)
    res = states("add", reg, bad)
    message = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert reason in message and "train the checkpoint again" in message
    assert listed(reg) == ["v1"]
    assert not any(p.name == "notes.txt" for p in reg.rglob("*"))


def test_a_damaged_checkpoint_cannot_start_a_registry(gold_checkpoint, tmp_path):
    bad = _damaged(gold_checkpoint[0], tmp_path / "bad", "truncated weights")
    res = states("add", tmp_path / "reg", bad)
    assert res.exit_code == 1 and "is damaged" in res.output
    assert not (tmp_path / "reg" / "versions" / "v1").exists()


def test_the_safetensors_check_reads_a_good_file_as_good(gold_checkpoint):
    from tttembed.registry.chain import safetensors_problem

    blob = (gold_checkpoint[0] / "adapter" / "adapter_model.safetensors").read_bytes()
    assert safetensors_problem(blob) is None
    assert "file at" in safetensors_problem(blob + b"\0")
    assert "no header" in safetensors_problem(blob[:4])


def test_a_corrupt_chain_registry_json_names_the_chain_commands(gold_checkpoint, tmp_path):
    ckpt, _ = gold_checkpoint
    reg = tmp_path / "reg"
    assert states("add", reg, ckpt).exit_code == 0
    text = (reg / "registry.json").read_text()
    (reg / "registry.json").write_text(text[:len(text) // 2])
    res = states("list", reg)
    message = " ".join(res.output.split())
    assert res.exit_code == 1 and "corrupt registry manifest" in message
    assert "tttembed states add" in message and "serve --chain" in message


def test_states_list_shows_chain_replicas_as_state_replicas(gold_checkpoint, minilm,
                                                            chain_setup, tmp_path):
    import time

    from tests.serve.conftest import running
    from tests.serve.test_chain_routes import chain_app

    ckpt, _ = gold_checkpoint
    reg = tmp_path / "reg"
    assert states("add", reg, ckpt).exit_code == 0
    assert states("promote", reg, "v1").exit_code == 0
    with running(chain_app(chain_setup, minilm, chain=str(reg), registry_poll_s=0.1)):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            replicas = json.loads(states("list", reg, "--json").stdout)["replicas"]
            if replicas:
                break
            time.sleep(0.2)
        out = states("list", reg).output
    assert [r["version"] for r in replicas] == ["v1"] and replicas[0]["kind"] == "chain"
    assert "replica " in out and ": serves v1" in out and "none reported" not in out
