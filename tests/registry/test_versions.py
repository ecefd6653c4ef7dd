"""The state registry: versions written whole, promote / rollback chains, diff, and
refusals (another index, a corrupt record, an unknown version)."""

from __future__ import annotations

import numpy as np
import pytest

from tttembed.adapt.state import AdaptState
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.registry.versions import Registry, version_number


def _state(keys: tuple[str, ...], seed: int = 0) -> AdaptState:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(len(keys), 4)).astype(np.float32)
    return AdaptState("task", keys, v, np.full(len(keys), 0.5), np.ones(len(keys), np.int64),
                      identity="st:test", dim=4)


def test_versions_promote_and_roll_back_along_their_chain(tmp_path):
    reg = Registry(tmp_path / "r", create=True, index={"identity": "st:test"})
    assert reg.served() is None and reg.versions() == []
    names = [reg.register(_state(("a", "b"), i), parent=None, reason=f"r{i}").name
             for i in range(3)]
    assert names == ["v1", "v2", "v3"]
    for n in names:
        reg.promote(n, by="learner")
    assert reg.served() == "v3"
    assert reg.rollback()["served"] == "v2"  # what v3's promotion replaced
    assert reg.rollback()["served"] == "v1"
    assert reg.rollback()["served"] is None  # v1 replaced raw
    with pytest.raises(ConfigError, match="raw vectors"):
        reg.rollback()
    assert reg.rollback("v3")["served"] == "v3"
    v3 = reg.get("v3")
    assert v3.promoted and v3.manifest["reason"] == "r2"
    assert np.allclose(v3.load().vectors, _state(("a", "b"), 2).vectors)
    actions = [h["action"] for h in reg.served_record()["history"]]
    assert actions == ["promote"] * 3 + ["rollback"] * 4


def test_diff_names_the_keys_added_removed_and_changed(tmp_path):
    reg = Registry(tmp_path / "r", create=True)
    reg.register(_state(("a", "b"), 0))
    reg.register(_state(("b", "c"), 1))
    d = reg.diff("v1", "v2")
    assert (d["added"], d["removed"], d["changed"], d["unchanged"]) == (["c"], ["a"], ["b"], 0)
    assert reg.diff("v1", "v1")["unchanged"] == 2


def test_a_version_that_applies_nothing_is_kept_for_its_evidence(tmp_path):
    reg = Registry(tmp_path / "r", create=True)
    v = reg.register(None, reason="refused: raw everywhere", evidence={"gain": 0.0})
    assert not v.state_path.exists() and v.manifest["applies"] is False
    assert reg.diff("v1", "v1")["unchanged"] == 0


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="not a state registry"):
        Registry(tmp_path / "none")
    reg = Registry(tmp_path / "r", create=True, index={"identity": "st:test"})
    with pytest.raises(StateMismatch, match="identity"):
        Registry(tmp_path / "r", index={"identity": "st:other"})
    with pytest.raises(ConfigError, match="no version 'v9'"):
        reg.get("v9")
    with pytest.raises(ConfigError, match="not a version name"):
        version_number("latest")
    (tmp_path / "r" / "served.json").write_text("{not json")
    with pytest.raises(DataError, match="served-version record"):
        reg.served()


def test_a_half_written_version_is_never_listed(tmp_path):
    reg = Registry(tmp_path / "r", create=True)
    reg.register(_state(("a",)))
    stray = tmp_path / "r" / "versions" / ".v2.tmp-123"
    stray.mkdir()
    (stray / "vectors.npz").write_bytes(b"partial")
    partial = tmp_path / "r" / "versions" / "v3"
    partial.mkdir()  # a folder without its manifest
    assert [v.name for v in reg.versions()] == ["v1"]
