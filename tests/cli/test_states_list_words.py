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
