"""Which ``serve --chain`` a ``--learn`` server also learns chain versions into
(:func:`tttembed.serve.run.chain_to_learn`): a chain registry followed unpinned, with a
judge that pays; base, a checkpoint folder, a pinned ``REGISTRY@vN`` or ``--judge none``
learn states only, said in one line at start-up."""

from __future__ import annotations

import pytest


def _learner(judge: str = "bm25"):
    from tttembed.cli.loop import loop_config

    return loop_config("reg/states", "idx", judge)


@pytest.fixture()
def registry(tmp_path):
    root = tmp_path / "chainreg"
    root.mkdir()
    (root / "registry.json").write_text("{}")
    (tmp_path / "ckpt").mkdir()
    return root


def _learned(chain, learner):
    from tttembed.serve.config import ServeConfig
    from tttembed.serve.run import chain_to_learn

    return chain_to_learn(ServeConfig(index="idx", chain=chain), learner)


def test_a_chain_registry_is_learned_into(registry):
    assert _learned(str(registry), _learner()) == (str(registry), "")
    url = "postgresql://u@localhost:5432/chain"
    assert _learned(url, _learner()) == (url, "")


@pytest.mark.parametrize("chain, judge, why", [
    ("base", "bm25", "is base or a checkpoint folder: chain learning needs a chain registry"),
    ("{ckpt}", "bm25", "is base or a checkpoint folder"),
    ("{reg}@v3", "bm25", "pins v3: a pinned chain follows no promotion"),
    ("{reg}", "none", "--judge none pays nothing"),
])
def test_what_is_not_learned_is_one_line_and_states_are_learned_still(registry, chain,
                                                                      judge, why):
    spec = chain.format(reg=registry, ckpt=registry.parent / "ckpt")
    learned, note = _learned(spec, _learner(judge))
    assert learned is None and "\n" not in note
    assert note.startswith("note: --learn learns states only: ") and why in note, note


def test_without_learn_or_chain_there_is_nothing_to_say(registry):
    assert _learned(str(registry), None) == (None, "")
    assert _learned(None, _learner()) == (None, "")
