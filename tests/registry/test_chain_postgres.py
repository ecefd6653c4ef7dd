"""Chain encoder versions in a PostgreSQL registry (a real server): added with `tttembed
states add URL CHECKPOINT`, and two replicas started with ``--chain URL`` serving the
promoted version within their registry poll."""

# ruff: noqa: F811  (the fixtures imported from the chain and serve tests)
from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    CHAINS,
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.pg import database_fixtures
from tests.registry.test_chain import edited
from tests.serve.conftest import running
from tests.serve.test_chain_routes import chain_app, chain_setup  # noqa: F401
from tttembed.cli import app as cli

pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'tttembed[loop]'")
pg_cluster, url = database_fixtures("c_")
runner = CliRunner()


def states(*args: Any) -> Any:
    return runner.invoke(cli, ["states", *map(str, args)], catch_exceptions=False)


def test_replicas_pick_up_a_promoted_chain_version(url, gold_checkpoint, chain_setup, minilm,
                                                   tmp_path):
    ckpt, _ = gold_checkpoint
    assert states("add", url, ckpt).exit_code == 0
    res = states("add", url, edited(ckpt, tmp_path / "b", epochs_done=2))
    assert res.exit_code == 0 and "as v2" in res.output
    shown = states("show", url, "v1", "--json")
    assert '"kind": "chain"' in shown.stdout
    with ExitStack() as stack:
        urls = [stack.enter_context(running(chain_app(
            chain_setup, minilm, chain=url, registry_poll_s=0.2,
            registry_cache=str(tmp_path / f"cache{i}"))))
            for i in range(2)]

        def versions() -> list[Any]:
            return [httpx.post(f"{u}/v1/chain/search", json={"question": CHAINS[0][1]},
                               timeout=60).json()["version"] for u in urls]

        assert versions() == [None, None]          # nothing promoted: the base encoder
        for name in ("v1", "v2"):
            assert states("promote", url, name).exit_code == 0
            deadline = time.monotonic() + 20
            while versions() != [name, name]:
                assert time.monotonic() < deadline, f"{name} did not reach both replicas"
                time.sleep(0.1)
    assert (tmp_path / "cache0" / "versions").is_dir()


def test_the_same_checkpoint_added_twice_is_said_not_added_again(url, gold_checkpoint):
    import json

    ckpt, _ = gold_checkpoint
    assert "as v1" in states("add", url, ckpt).output
    res = states("add", url, ckpt)
    assert res.exit_code == 0 and "is already v1" in res.output, res.output
    assert [v["version"] for v in json.loads(states("list", url, "--json").stdout)
            ["versions"]] == ["v1"]
