"""What ``tttembed loop --chain SPEC`` says when SPEC cannot be learned into (trust round
6, issue 77, c): a pinned ``REGISTRY@vN`` is refused as a pin (a learner learns into the
registry it follows), a folder that does not exist is named as missing, each with the fix,
before any index or model is loaded; neither reads the pin as a folder name."""

from __future__ import annotations

import pytest

from tttembed.core.errors import ConfigError
from tttembed.loop.chain.run import open_chain_registry


def _said(spec: str) -> str:
    with pytest.raises(ConfigError) as err:
        open_chain_registry(spec, None)
    line = str(err.value)
    assert "\n" not in line and "no registry.json" not in line, line
    return line


def test_a_pinned_registry_is_refused_as_a_pin(tmp_path):
    reg = tmp_path / "chain"
    reg.mkdir()
    (reg / "registry.json").write_text("{}")
    line = _said(f"{reg}@v1")
    assert line.startswith(f"--chain {reg}@v1: pins v1"), line
    assert f"give --chain {reg}" in line and "a pin is not accepted" in line


def test_a_pin_on_a_database_registry_is_refused_too():
    line = _said("postgresql://u@localhost:5432/chain@v2")
    assert "pins v2" in line and "give --chain postgresql://u@localhost:5432/chain " in line


def test_a_missing_folder_is_named_with_how_to_make_it(tmp_path):
    missing = tmp_path / "nope"
    line = _said(str(missing))
    assert line.startswith(f"--chain {missing}: no such folder"), line
    assert f"tttembed states add {missing} CHECKPOINT" in line
    assert not missing.exists()
