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


def test_a_learning_server_naming_no_task_says_a_typo_becomes_a_new_task():
    """Trust round 6 (issue 77, a): a learning server with no --query-source accepts
    every task until a state names one (by design: an empty registry learns its first
    tasks from traffic); it says so at start-up, with the option that refuses typos."""
    from tttembed.serve.config import ServeConfig
    from tttembed.serve.run import open_tasks_note

    note = open_tasks_note(ServeConfig(index="idx"), _learner())
    assert "\n" not in note and note.startswith("note: no --query-source names")
    assert "a typo'd task becomes a new task" in note and "--query-source" in note
    assert "404" in note
    named = ServeConfig(index="idx", queries=("data/stdlib-docs",))
    assert open_tasks_note(named, _learner()) == ""
    assert open_tasks_note(ServeConfig(index="idx", unknown_task="raw"), _learner()) == ""
    assert open_tasks_note(ServeConfig(index="idx"), None) == ""


def test_a_server_knowing_no_task_serves_any_and_one_knowing_a_task_refuses_a_typo():
    """The two sides of serving.md's promise: no state or query file names a task ->
    every task is served (nothing to fall back from, and a learner must see a task to
    learn it); once one is named, a typo is a 404 listing the known tasks."""
    from tttembed.serve.config import ServeConfig
    from tttembed.serve.routes import served_task
    from tttembed.serve.wire import ApiError
    from tttembed.ttt.snapshot import Snapshot

    class _Svc:
        config = ServeConfig(index="idx")

    empty = Snapshot(generation=0, states=(), mtimes=(), qids={})
    assert served_task(_Svc(), empty, "stdlib-doc") == "stdlib-doc"
    named = Snapshot(generation=0, states=(), mtimes=(), qids={"stdlib-docs": {}})
    with pytest.raises(ApiError, match="unknown task 'stdlib-doc'.*stdlib-docs") as err:
        served_task(_Svc(), named, "stdlib-doc")
    assert err.value.status == 404
