"""Chain encoder files packed for a database version row: round trip, torn bytes and names
that leave their folder refused."""

from __future__ import annotations

import pytest

from tttembed.core.errors import DataError
from tttembed.registry.chain import pack, unpack


def test_pack_round_trips_and_is_deterministic():
    files = {"manifest.json": b"{}", "adapter/adapter_model.safetensors": b"\x00" * 100,
             "adapter/adapter_config.json": b'{"r": 8}'}
    blob = pack(files)
    assert unpack(blob) == files
    assert pack(dict(reversed(list(files.items())))) == blob  # order-free: one content id


def test_torn_bytes_and_escaping_names_are_refused():
    blob = pack({"manifest.json": b"{}" * 10})
    with pytest.raises(DataError, match="damaged"):
        unpack(blob[:-3])
    for name in ("../x", "/etc/passwd"):
        with pytest.raises(DataError, match="leaves its folder"):
            unpack(pack({name: b"x"}))
