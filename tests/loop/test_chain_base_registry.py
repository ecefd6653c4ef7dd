"""``tttembed states add FOLDER base --index INDEX``: a chain registry that serves the
untrained encoder until the learner promotes a version, made from the CLI (trust round
6: the chain guide's learning block began with a checkpoint only ``chain train`` makes);
bad input is one line naming the fix."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from tests.chain.conftest import CHAINS
from tests.serve.conftest import running
from tests.serve.test_chain_routes import chain_setup  # noqa: F401  (fixture)
from tttembed.cli import app


def _add(*args: str) -> object:
    return CliRunner().invoke(app, ["states", "add", *args])


def test_a_base_chain_registry_is_made_for_the_index_and_serves_base(chain_setup,  # noqa: F811
                                                                      minilm, tmp_path):
    from tttembed.registry.chain import is_chain
    from tttembed.registry.open import open_registry
    from tttembed.serve import create_app

    reg = tmp_path / "reg" / "chain"
    res = _add(str(reg), "base", "--index", str(chain_setup["index"]))
    assert res.exit_code == 0, res.output
    assert "serving the untrained encoder (base)" in res.output
    assert f"tttembed loop --chain {reg}" in res.output
    opened = open_registry(str(reg))
    assert is_chain(opened.manifest) and opened.versions() == []
    again = _add(str(reg), "base", "--index", str(chain_setup["index"]))
    assert again.exit_code == 0 and open_registry(str(reg)).versions() == []
    app_ = create_app(index=str(chain_setup["index"]), chain=str(reg), embedder=minilm)
    with running(app_) as url:
        got = httpx.post(f"{url}/v1/chain/search", json={"question": CHAINS[0][1]},
                         timeout=60).json()
    assert (got["encoder"], got["version"]) == ("base", None) and got["data"]


def test_base_without_an_index_says_to_give_one(tmp_path):
    res = _add(str(tmp_path / "chain"), "base")
    assert res.exit_code != 0
    line = res.output.strip().splitlines()[-1]
    assert "give the passage index it serves with --index" in res.output, res.output
    assert not (tmp_path / "chain").exists(), line


def test_base_into_a_state_registry_is_refused(chain_setup, tmp_path):  # noqa: F811
    from tttembed.registry.open import open_registry

    states = tmp_path / "states"
    open_registry(str(states), create=True, index={
        "identity": "x", "index": "i", "corpus_fingerprint": ""})
    res = _add(str(states), "base", "--index", str(chain_setup["index"]))
    assert res.exit_code != 0 and "holds learned states, not chain encoders" in res.output
