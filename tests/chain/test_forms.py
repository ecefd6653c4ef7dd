"""The chain's state forms (``tttembed.chain.forms``) and the state settings a checkpoint
records (``trained_settings``): every reader uses the limit and form an encoder was
trained with; the untrained encoder reads 128-token text states."""

from __future__ import annotations

import logging

import pytest

from tests.chain.conftest import DOCS
from tttembed.chain.checkpoint import FORMAT, state_settings, trained_settings
from tttembed.chain.forms import (
    DEFAULT_MAX_SEQ_LENGTH,
    StateSettings,
    check_form,
    entity_words,
    form_passages,
)
from tttembed.chain.traffic import chain_kind, logged_chain
from tttembed.core.errors import ConfigError
from tttembed.core.io import write_manifest
from tttembed.data.beir import doc_text


def test_the_entity_form_reduces_each_passage_and_the_text_form_keeps_it():
    titles = [t for t, _ in DOCS.values()]
    passages = [doc_text({"title": t, "text": x}) for t, x in DOCS.values()]
    assert form_passages(passages, titles, "text") is passages
    ents = list(form_passages(passages, titles, "entities"))
    # the joined passage (title first) reduces as its text alone: the title's words are
    # skipped either way
    assert ents == [entity_words(t, x) for t, x in DOCS.values()]
    assert ents[0] == "Kestrel Bay"  # Ada Marlow's passage: its bridge, no title word
    assert all(len(e.split()) <= 3 for e in ents)
    with pytest.raises(ConfigError, match="every passage's title"):
        form_passages(passages, titles[:2], "entities")


def test_an_unknown_form_is_refused_naming_the_option_and_the_choices():
    with pytest.raises(ConfigError, match=r"--chain-state 'entity'.*text or entities"):
        check_form("entity")


def _checkpoint(path, config):
    path.mkdir()
    write_manifest(path, {"format": FORMAT, "format_version": 1, "config": config})
    return path


def test_readers_use_the_settings_a_checkpoint_records(tmp_path):
    # the untrained encoder: 128-token entity states, measured best with it
    assert trained_settings(None) == StateSettings(DEFAULT_MAX_SEQ_LENGTH, "entities") \
        == StateSettings(128, "entities")
    ckpt = _checkpoint(tmp_path / "c256", {"max_seq_length": 256, "state": "entities"})
    assert trained_settings(ckpt) == StateSettings(256, "entities")
    # what a reader is asked for wins, each setting on its own
    assert state_settings(ckpt, 64) == StateSettings(64, "entities")
    assert state_settings(ckpt, None, "text") == StateSettings(256, "text")
    with pytest.raises(ConfigError):
        state_settings(ckpt, None, "words")


def test_a_checkpoint_with_no_recorded_limit_keeps_256_and_says_so_once(tmp_path, caplog):
    ckpt = _checkpoint(tmp_path / "old", {"base": "st:x"})
    with caplog.at_level(logging.WARNING, logger="tttembed.chain"):
        assert trained_settings(ckpt) == StateSettings(256, "text")
        assert trained_settings(ckpt) == StateSettings(256, "text")
    said = [r for r in caplog.records if "records no state token limit" in r.getMessage()]
    assert len(said) == 1 and str(ckpt) in said[0].getMessage()


def test_a_logged_kind_carries_a_form_other_than_text():
    assert chain_kind(2, 128) == "chain:2:128"  # text: the kind older searches carry
    assert chain_kind(3, 128, "entities") == "chain:3:128:entities"
    assert logged_chain("chain:3:128:entities") == logged_chain("chain:3:128:entities")
    got = logged_chain("chain:3:128:entities")
    assert got is not None and (got.hops, got.max_seq_length, got.form) == \
        (3, 128, "entities")
    old = logged_chain("chain:2:256")
    assert old is not None and old.form == "text"
    assert logged_chain("chain:2:256:words") is None


def test_an_evaluation_of_encoders_trained_on_different_states_asks_which(tmp_path):
    from tttembed.chain.api import eval_settings

    a = _checkpoint(tmp_path / "a", {"max_seq_length": 128, "state": "text"})
    b = _checkpoint(tmp_path / "b", {"max_seq_length": 256, "state": "text"})
    assert eval_settings([("untrained", None)], None, None) == \
        StateSettings(128, "entities")
    # with trained encoders, the states they record (the untrained one reads them too)
    assert eval_settings([("untrained", None), ("a", a)], None, None) == \
        StateSettings(128, "text")
    assert eval_settings([("untrained", None), ("b", b)], None, None) == \
        StateSettings(256, "text")
    assert eval_settings([("untrained", None)], None, "text") == StateSettings(128, "text")
    with pytest.raises(ConfigError, match="a: text at 128 tokens, b: text at 256"):
        eval_settings([("untrained", None), ("a", a), ("b", b)], None, None)
    assert eval_settings([("a", a), ("b", b)], 200, "text") == StateSettings(200, "text")


def test_the_cost_benchmark_names_a_checkpoint_of_another_corpus(tmp_path):
    """``bench_chain.py --encoder CKPT`` with a checkpoint trained on another corpus: the
    CLI refuses it, the benchmark measures it as a transfer and says so (trust round 6)."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_chain

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_manifest(ckpt, {"format": FORMAT, "format_version": 1, "config": {},
                          "corpus_fingerprint": "b" * 64})
    loaded = SimpleNamespace(index=SimpleNamespace(manifest={"corpus_fingerprint": "a" * 64}))
    note = bench_chain.transfer_note(loaded, ckpt)
    assert "trained against another corpus" in note and "bbbbbbbbbbbb" in note
    loaded.index.manifest["corpus_fingerprint"] = "b" * 64
    assert bench_chain.transfer_note(loaded, ckpt) == ""
