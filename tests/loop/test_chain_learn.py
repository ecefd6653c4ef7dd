# ruff: noqa: F811  (the fixtures imported from the chain tests)
"""Learning chain versions from traffic (``tttembed loop --chain``): the learner trains
only on the states the served encoder reached (token for token), never on the questions
held out by text, pays each pair once within the budget, keeps a candidate the held-out
check does not find better unpromoted with the reason, and meets a version that cannot be
loaded, a judge that goes down and a --min-queries out of reach with one line each."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from tests.chain.conftest import (  # noqa: F401  (fixtures)
    _one_torch_thread,
    gold_checkpoint,
    tiny_data,
    tiny_loaded,
)
from tests.loop.chain_traffic import (
    answered,
    chain_loop,
    judge_server,
    questions,
    serve_traffic,
    write_judged_dataset,
)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory, minilm, gold_checkpoint):
    """A served untrained chain (a chain registry holding the gold checkpoint as v1, not
    promoted) asked every question once; the texts it encoded."""
    from tttembed.chain.setup import load
    from tttembed.registry.open import open_for

    root = tmp_path_factory.mktemp("chainlearn")
    data = root / "data"
    write_judged_dataset(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTTEMBED_CACHE_DIR", str(root / "cache"))
        load(data, "test", root / "idx")
    setup = {"data": data, "index": root / "idx"}
    work = root / "work"
    ckpt, _ = gold_checkpoint
    open_for(str(work / "chain"), ckpt).add(ckpt, by="user")
    asked = [q for _, q, _ in questions()]
    seen = serve_traffic(setup, minilm, str(work / "chain"), str(work / "states"), asked)
    return {**setup, "work": work, "seen": seen, "asked": asked}


@pytest.fixture()
def fresh(traffic, tmp_path):
    """A copy of the traffic's registries and store for one test."""
    shutil.copytree(traffic["work"], tmp_path / "w")
    return tmp_path / "w"


def _spent(loop) -> int:
    return sum(loop.store.spent().values())


def test_trains_only_on_served_states_token_for_token_never_on_held_out(traffic, fresh,
                                                                         minilm, monkeypatch,
                                                                         tmp_path):
    from tttembed.chain import traffic_train
    from tttembed.chain.states import SEP
    from tttembed.loop.chain_rows import held_out

    trained: list[str] = []
    real_fit = traffic_train.fit_epoch

    def recording(s, states, pos, neg, epoch, progress):
        trained.extend(s.texts.texts(states))
        return real_fit(s, states, pos, neg, epoch, progress)

    monkeypatch.setattr(traffic_train, "fit_epoch", recording)
    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        loop = chain_loop(traffic, url, fresh)
        try:
            loop.run(once=True)
            [cycle] = loop.cycles
            rewards = loop.store.rewards(trusted_only=False)
        finally:
            loop.close()
    assert cycle.version == "v2", cycle.reason
    assert trained, "nothing was trained"
    served = set(traffic["seen"])
    assert set(trained) <= served                   # every training state was served
    tok = minilm.model.tokenizer
    served_ids = {tuple(tok(t)["input_ids"]) for t in served}
    assert all(tuple(tok(t)["input_ids"]) in served_ids for t in trained)
    held = [q for q in traffic["asked"] if held_out(q)]
    assert held and len(held) < len(traffic["asked"])
    asked = {t.split(SEP)[0].strip() for t in trained}   # the question each state holds
    assert asked <= set(traffic["asked"]) and not asked & set(held)
    # the judge was paid for the held-out questions only by the promotion check
    assert not [r for r in rewards if r.source == "judge" and held_out(r.query)]
    assert {r.query for r in rewards if r.source == "validation"} <= set(held)


def test_each_pair_is_paid_once_within_the_budget(traffic, fresh, tmp_path):
    count = tmp_path / "pairs.txt"
    with judge_server(traffic["data"], count) as (url, _):
        loop = chain_loop(traffic, url, fresh, judge_budget=40)
        try:
            loop.run(once=True)
            first = _spent(loop)
            assert answered(count) == first and 0 < first <= 40
        finally:
            loop.close()
        again = chain_loop(traffic, url, fresh, judge_budget=1000)  # a restart, more budget
        try:
            again.run(once=True)
            total = _spent(again)
            rows = again.store.rewards(trusted_only=False)
        finally:
            again.close()
    assert answered(count) == total > first          # only the new pairs were asked
    keys = Counter((r.task, r.query, r.doc_id) for r in rows)
    assert max(keys.values()) == 1 and sum(r.paid for r in rows) == total


def test_a_candidate_short_of_min_queries_is_kept_unpromoted_with_the_reason(traffic, fresh,
                                                                              tmp_path):
    from tttembed.registry.open import open_registry

    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        loop = chain_loop(traffic, url, fresh, min_queries=500)
        try:
            loop.run(once=True)
        finally:
            loop.close()
    [cycle] = loop.cycles
    assert not cycle.promoted and "\n" not in cycle.reason
    assert "--min-queries 500" in cycle.reason and "kept unpromoted" in cycle.reason
    reg = open_registry(str(fresh / "chain"))
    v = reg.get(cycle.version)
    assert reg.served() is None and v.manifest["reason"] == cycle.reason
    assert v.manifest["evidence"]["decision"] == "waiting"
    assert v.manifest["parent"] is None and v.manifest["trained"]["states"] > 0


def test_the_promotion_follows_the_paired_test(traffic, fresh, tmp_path):
    from tttembed.loop.chain_promote import ALPHA
    from tttembed.registry.open import open_registry

    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        loop = chain_loop(traffic, url, fresh)
        try:
            loop.run(once=True)
        finally:
            loop.close()
    [cycle] = loop.cycles
    ev = cycle.check
    assert ev["decided"] >= 2 and ev["validation_pairs"] >= 0
    better = ev["better"] > ev["worse"] and ev["p"] < ALPHA
    assert cycle.promoted == better == (ev["decision"] == "better")
    reg = open_registry(str(fresh / "chain"))
    assert reg.served() == (cycle.version if better else None)
    assert ("promoted" if better else "kept unpromoted") in cycle.reason


def test_sign_test():
    from tttembed.loop.chain_promote import sign_test

    assert sign_test([False] * 6, [True] * 6) == (6, 0, 1 / 64)
    assert sign_test([True, False], [True, False]) == (0, 0, 1.0)
    b, w, p = sign_test([True] * 3 + [False] * 5, [False] * 3 + [True] * 5)
    assert (b, w) == (5, 3) and p == pytest.approx(93 / 256)


def test_a_served_version_that_cannot_be_loaded_is_one_line_and_pays_nothing(traffic, fresh,
                                                                             tmp_path):
    from tttembed.registry.open import open_registry

    reg = open_registry(str(fresh / "chain"))
    reg.promote("v1", by="user")
    adapter = fresh / "chain" / "versions" / "v1" / "chain" / "adapter"
    (adapter / "adapter_model.safetensors").write_bytes(b"torn")
    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        loop = chain_loop(traffic, url, fresh)
        try:
            while loop.judge_step()[0]:
                pass
            before = _spent(loop)
            cycle = loop.run_cycle()
            assert _spent(loop) == before
        finally:
            loop.close()
    assert cycle.version is None and not cycle.promoted and "\n" not in cycle.reason
    assert "v1 cannot be loaded" in cycle.reason and "states rollback" in cycle.reason
    assert [v.name for v in open_registry(str(fresh / "chain")).versions()] == ["v1"]


def test_a_judge_down_mid_cycle_loses_nothing_and_pays_nothing_twice(traffic, fresh,
                                                                      tmp_path):
    from tttembed.registry.open import open_registry

    count = tmp_path / "pairs.txt"
    with judge_server(traffic["data"], count) as (url, _):
        loop = chain_loop(traffic, url, fresh)
        while loop.judge_step()[0]:
            pass
        paid = _spent(loop)
    try:  # the judge is gone: the check's validation pairs cannot be paid
        cycle = loop.run_cycle()
        assert _spent(loop) == paid and answered(count) == paid
    finally:
        loop.close()
    assert cycle.version is None and not cycle.promoted and "\n" not in cycle.reason
    assert "rerank" in cycle.reason.lower() or "judge" in cycle.reason.lower(), cycle.reason
    assert open_registry(str(fresh / "chain")).served() is None
    with judge_server(traffic["data"], count, port_of=url) as (url2, _):
        again = chain_loop(traffic, url2, fresh)
        try:
            again.run(once=True)
            assert answered(count) == _spent(again)
        finally:
            again.close()


def test_loop_cli_refuses_once_without_chain_and_a_state_registry_as_chain(traffic, fresh):
    from typer.testing import CliRunner

    from tttembed.cli import app

    runner = CliRunner()
    base = ["loop", "--registry", str(fresh / "states"), "--index", str(traffic["index"]),
            "--judge", "bm25", "--corpus", str(traffic["data"])]
    r = runner.invoke(app, [*base, "--once"])
    assert r.exit_code == 2 and "--once works with --chain only" in r.output
    r = runner.invoke(app, [*base, "--chain", str(fresh / "states"), "--once"])
    assert r.exit_code == 1 and "holds learned states, not chain encoders" in r.output
    assert "Traceback" not in r.output
