from __future__ import annotations

import torch

from tttembed.core.devices import ENV, pick_device


def test_explicit_device_wins(monkeypatch):
    monkeypatch.setenv(ENV, "cuda:3")
    assert pick_device("cpu") == "cpu"


def test_environment_then_hardware(monkeypatch):
    monkeypatch.setenv(ENV, "cpu")
    assert pick_device(None) == "cpu"
    monkeypatch.delenv(ENV)
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == "cuda"
