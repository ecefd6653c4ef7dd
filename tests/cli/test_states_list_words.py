"""`tttembed states list` says what it knows (trust round 5): a registry no loop has run
on has no rewards ledger, said in words ("rewards in the ledger: ?" before); a loop's own
store is counted; a version without an interval says why it has none."""

from __future__ import annotations

from typer.testing import CliRunner

from tttembed.cli import app


def _list(root) -> str:
    r = CliRunner().invoke(app, ["states", "list", str(root)])
    assert r.exit_code == 0, r.output
    return r.output


def test_a_registry_without_a_loop_store_says_so_not_a_question_mark(tmp_path):
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "reg", create=True)
    reg.register(None, parent=None, reason="refused: the validation budget judged none of the "
                 "5 queries whose top-10 changes",
                 evidence={"gain": 0.0, "ci_low": None, "ci_high": None, "p": 1.0,
                           "queries": 87, "changed": 0, "left_out": 5})
    out = _list(reg.root)
    assert "?" not in out, out
    assert "rewards in the ledger: none (no loop has stored any in" in out, out
    assert "fewer than 2 queries" not in out
    assert "(no interval: none of the 5 queries whose top-10 changes was judged)" in out, out


def test_a_loop_store_beside_the_registry_is_counted(tmp_path):
    from tttembed.loop.open import open_store
    from tttembed.loop.store import Reward
    from tttembed.registry.versions import Registry

    reg = Registry(tmp_path / "reg", create=True)
    store = open_store(None, reg.root)
    try:
        store.add_rewards([Reward("t", "a question", "d1", 0.5, 1.0)])
    finally:
        store.close()
    assert "rewards in the ledger: 1" in _list(reg.root)


def _chain_registry(root):
    from tttembed.registry.versions import Registry

    return Registry(root, create=True, index={"kind": "chain", "identity": "st:test",
                                              "corpus_fingerprint": "fp", "base": "b"})


def test_a_chain_registry_says_where_its_rewards_are_and_counts_them_there(tmp_path):
    """Trust round 6 (issue 77, d): `states list` of a chain registry said "rewards in the
    ledger: none" while its learner's rewards were in its --registry store: it counts the
    chain rewards in the store the chain learner recorded, and names that store."""
    from tttembed.loop.coordination import open_coordination
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import CHAIN_TASK
    from tttembed.loop.status import LoopState, write_status
    from tttembed.loop.store import Reward

    chain = _chain_registry(tmp_path / "chain")
    states = tmp_path / "states"
    states.mkdir()
    store = open_store(None, states)
    try:
        store.add_rewards([Reward(CHAIN_TASK, "q1", "d1", 0.5, 1.0),
                           Reward(CHAIN_TASK, "q2", "d2", 0.0, 1.0),
                           Reward("stdlib-docs", "q3", "d3", 1.0, 1.0)])
    finally:
        store.close()
    write_status(open_coordination(chain), LoopState(pairs_judged=3, judge_budget=100,
                                                     store=str(states)))
    out = _list(chain.root)
    assert "rewards in the ledger: none" not in out, out
    assert f"chain rewards: 2 in the chain learner's store {states}" in out, out


def test_a_chain_registry_no_learner_ran_on_says_where_rewards_would_be(tmp_path):
    out = _list(_chain_registry(tmp_path / "chain").root)
    assert "rewards in the ledger: none" not in out, out
    assert "chain rewards: none kept in a chain registry" in out
    assert "keeps them in its --registry store" in out


def test_the_chain_learner_records_its_store_with_the_password_masked(tmp_path):
    from tttembed.cli.loop import loop_config
    from tttembed.loop.chain.run import store_location

    (tmp_path / "states").mkdir()
    folder = loop_config(str(tmp_path / "states"), "idx", "bm25")
    assert store_location(folder) == str((tmp_path / "states").resolve())
    url = loop_config("postgresql://u:SECRET@db:5432/reg", "idx", "bm25")
    assert store_location(url) == "postgresql://u:***@db:5432/reg"
