# ruff: noqa: F811  (the fixtures imported from the chain tests)
"""Learning chain versions from traffic (``tttembed loop --chain``): the learner trains
only on the states the served encoder reached (token for token), never on the questions
held out by text, pays each pair once within the budget, keeps a candidate the held-out
check does not find better unpromoted with the reason, and meets a version that cannot be
loaded, a judge that goes down and a --min-queries out of reach with one line each."""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter
from typing import Any

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
    promoted) on text states (``--chain-state text``; the learner trains text states)
    asked every question once; the texts it encoded."""
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
    seen = serve_traffic(setup, minilm, str(work / "chain"), str(work / "states"), asked,
                         chain_state="text")
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
    from tttembed.loop.chain.rows import held_out

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


def test_entity_served_traffic_is_checked_as_served_and_learned_as_text(
        traffic, minilm, monkeypatch, tmp_path):
    """The untrained encoder's default (entity states): the held-out check runs the served
    side on the entity states the server answered with (its top lists are the served
    ones), the candidate learns and is checked on the text states of the chains the served
    encoder reached, and records text."""
    from tttembed.chain.checkpoint import trained_settings
    from tttembed.chain.traffic import logged_chain
    from tttembed.loop.chain import promote as chain_promote
    from tttembed.loop.chain.rows import held_out
    from tttembed.registry.open import open_registry

    work = tmp_path / "w"
    shutil.copytree(traffic["work"], work)
    for old in (work / "states").glob("loop.sqlite*"):  # a store of this traffic alone
        old.unlink()
    serve_traffic(traffic, minilm, str(work / "chain"), str(work / "states"),
                  traffic["asked"])  # the default: entity states
    lists: dict[str, dict[str, list[str]]] = {}
    real = chain_promote.chain_top_lists

    def recording(learner, path, questions, steps, limit, what, form="text"):
        got = real(learner, path, questions, steps, limit, what, form)
        lists[what] = {**dict(zip(questions, got)), "form": form}  # type: ignore[dict-item]
        return got

    monkeypatch.setattr(chain_promote, "chain_top_lists", recording)
    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        loop = chain_loop(traffic, url, work)
        try:
            served = {s.query: s.ids[:chain_promote.K] for s in loop.store.searches()}
            kinds = {logged_chain(s.kind).form for s in loop.store.searches()}  # type: ignore[union-attr]
            loop.run(once=True)
            [cycle] = loop.cycles
        finally:
            loop.close()
    assert kinds == {"entities"}
    assert cycle.version == "v2", cycle.reason
    assert lists["served"]["form"] == "entities" and lists["candidate"]["form"] == "text"
    held = [q for q in traffic["asked"] if held_out(q)]
    assert held and all(list(served[q]) == lists["served"][q] for q in held)
    version = open_registry(str(work / "chain")).get("v2")
    assert version.manifest["trained"]["served_state"] == "entities"
    assert trained_settings(version.path / "chain").form == "text"


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
    drift = again.store.spent().get("drift", 0)      # the drift audits' re-scores
    assert max(keys.values()) == 1 and sum(r.paid for r in rows) + drift == total


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


def test_a_cycle_with_nothing_new_trains_nothing_and_says_which_version_answered(
        traffic, fresh, tmp_path, monkeypatch):
    from tttembed.chain import traffic_train
    from tttembed.registry.open import open_registry

    fits: list[int] = []
    real_fit = traffic_train.fit_epoch

    def counting(s, states, pos, neg, epoch, progress):
        fits.append(epoch)
        return real_fit(s, states, pos, neg, epoch, progress)

    monkeypatch.setattr(traffic_train, "fit_epoch", counting)
    cycles = []
    with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
        for need in (500, 500, 2):     # the same inputs twice, then another --min-queries
            loop = chain_loop(traffic, url, fresh, min_queries=need)
            try:
                loop.run(once=True)
                cycles.append((loop.cycles[-1], len(fits)))
            finally:
                loop.close()
    (first, trained), (second, again), (third, later) = cycles
    assert first.version == "v2" and trained > 0
    assert second.version is None and again == trained        # nothing trained
    assert not second.promoted and "\n" not in second.reason
    assert second.reason.startswith("nothing new to learn: v2 ") and "kept unpromoted" in \
        second.reason and "--min-queries 500" in second.reason
    assert third.version == "v3" and later > again            # --min-queries is an input
    reg = open_registry(str(fresh / "chain"))
    assert [v.name for v in reg.versions()] == ["v1", "v2", "v3"]
    digests = [reg.get(n).manifest["trained"]["inputs_digest"] for n in ("v2", "v3")]
    assert all(len(d) == 64 for d in digests) and digests[0] != digests[1]


def test_the_promotion_follows_the_paired_test(traffic, fresh, tmp_path):
    from tttembed.loop.chain.promote import ALPHA
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
    from tttembed.loop.chain.promote import sign_test

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
            _judge_all(loop)
            before = _spent(loop)
            cycle = loop.run_cycle()
            assert _spent(loop) == before
        finally:
            loop.close()
    assert cycle.version is None and not cycle.promoted and "\n" not in cycle.reason
    assert "v1 cannot be loaded" in cycle.reason and "states rollback" in cycle.reason
    assert [v.name for v in open_registry(str(fresh / "chain")).versions()] == ["v1"]


def _judge_all(loop: Any) -> None:
    """Pay every pending pair: until the judge step says drained (a step may pay nothing
    while the rate bucket refills, which is not the end; at most a minute)."""
    deadline = time.monotonic() + 60.0
    while not loop.judge_step()[1]:
        assert time.monotonic() < deadline, "the chain judge never drained"


def test_a_judge_down_mid_cycle_loses_nothing_and_pays_nothing_twice(traffic, fresh,
                                                                      tmp_path, caplog):
    from tttembed.registry.open import open_registry

    count = tmp_path / "pairs.txt"
    with judge_server(traffic["data"], count) as (url, _):
        loop = chain_loop(traffic, url, fresh)
        _judge_all(loop)
        paid = _spent(loop)
    try:  # the judge is gone: the check's validation pairs cannot be paid
        with caplog.at_level(logging.INFO, logger="tttembed.loop"):
            cycle = loop.run_cycle()
        assert _spent(loop) == paid and answered(count) == paid
    finally:
        loop.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("chain cycle")]
    assert len(said) == 1 and "\n" not in said[0] and cycle.reason in said[0], said
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


def test_a_judge_swapped_between_cycles_freezes_chain_promotions(traffic, fresh, tmp_path,
                                                                 caplog, minilm):
    """The state loop's drift audit guards the chain learner: with the judge unchanged the
    first cycle's audit passes; a judge whose answers turn around before the second cycle
    disagrees with its past chain rewards, so that cycle learns and promotes nothing and
    says why (its reason, the learner's status, a log line), its re-scores paid within the
    budget; a restarted learner is still frozen."""
    import logging
    import threading

    import httpx

    from tests.serve.conftest import running
    from tttembed.loop.status import loop_status
    from tttembed.registry.open import open_registry
    from tttembed.serve import create_app

    turned, count = threading.Event(), tmp_path / "pairs.txt"
    with judge_server(traffic["data"], count, turned=turned) as (url, _):
        loop = chain_loop(traffic, url, fresh, drift_sample=20, judge_budget=600)
        try:
            loop.run(once=True)
            [first] = loop.cycles
            assert first.version == "v2", first.reason
            served = open_registry(str(fresh / "chain")).served()
            turned.set()  # the judge is swapped between two cycles
            with caplog.at_level(logging.INFO, logger="tttembed.loop"):
                second = loop.run_cycle()
            assert second.version is None and not second.promoted, second.reason
            assert "promotions frozen" in second.reason and "disagrees" in second.reason
            assert "\n" not in second.reason
            audits = loop.state.audits
            spend = loop.store.spent()
        finally:
            loop.close()
        again = chain_loop(traffic, url, fresh, drift_sample=20, judge_budget=600)
        try:
            assert again.state.frozen  # a restart takes the freeze over
        finally:
            again.close()
    assert [a["passed"] for a in audits] == [True, False] and audits[0]["pairs"] > 0
    reg = open_registry(str(fresh / "chain"))
    assert [v.name for v in reg.versions()] == ["v1", "v2"] and reg.served() == served
    status = loop_status(reg, None)  # the loop status, of the chain registry
    assert status["frozen"] and "disagrees" in status["reason"]
    assert status["last_cycle"]["reason"] == second.reason
    app = create_app(index=str(traffic["index"]), chain=str(fresh / "chain"),
                     registry=str(fresh / "states"), embedder=minilm)
    with running(app) as served_at:
        seen = httpx.get(f"{served_at}/v1/loop", timeout=30).json()["chain_learner"]
    assert seen["frozen"] and seen["reason"] == status["reason"]
    assert seen["last_audit"]["passed"] is False and seen["cycles"] == 1
    frozen = [r for r in caplog.records if "promotions frozen" in r.getMessage()]
    assert frozen and all("\n" not in r.getMessage() for r in frozen)
    assert spend.get("drift", 0) >= 20 and sum(spend.values()) <= 600
    assert answered(count) == sum(spend.values())  # every re-score asked was counted


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


def test_a_second_chain_learner_on_one_chain_registry_is_refused(traffic, fresh, tmp_path,
                                                                 monkeypatch):
    """Trust round 6: two chain learners on one store paid nothing twice, but each trained
    and registered its own candidate with the same verdict. One chain learner per chain
    registry now: the second is refused in one line naming the first, nothing paid."""
    import subprocess
    import sys

    from tttembed.core.errors import ConfigError
    from tttembed.loop.chain import run as chain_run
    from tttembed.registry.open import open_registry

    code = ("import sys, time\nfrom tttembed.loop.coordination.folder import "
            "FolderCoordination\nwith FolderCoordination(sys.argv[1]).learner_lock():\n"
            "    print('held', flush=True)\n    time.sleep(600)\n")
    monkeypatch.setattr(chain_run, "lower_priority", lambda nice: None)  # not the tests'
    monkeypatch.setattr(chain_run, "configure_log", lambda: None)
    first = subprocess.Popen([sys.executable, "-c", code, str(fresh / "chain")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        with judge_server(traffic["data"], tmp_path / "pairs.txt") as (url, _):
            loop = chain_loop(traffic, url, fresh)
            config = loop.config
            loop.close()
            with pytest.raises(ConfigError, match="another learner runs on registry"):
                chain_run.run_chain_loop(config, str(fresh / "chain"), once=True)
        assert answered(tmp_path / "pairs.txt") == 0  # the refused learner paid nothing
    finally:
        first.kill()
        first.wait(30)
    assert [v.name for v in open_registry(str(fresh / "chain")).versions()] == ["v1"]


def test_the_check_says_what_traffic_it_needs_before_it_runs():
    """Trust round 6: a check that cannot reach p < 0.05 on its held-out set says so
    before it is run, and a waiting one says how many asked questions it waits for (with
    what was measured), not only the --min-queries it lacks."""
    from tttembed.loop.chain.promote import SIGN_MIN, asked_needed, cannot_promote

    assert 0.5 ** SIGN_MIN < 0.05 <= 0.5 ** (SIGN_MIN - 1)  # the fewest that can decide
    assert "can never reach p < 0.05 (it needs at least 5 that differ)" in cannot_promote(4)
    assert cannot_promote(SIGN_MIN) == ""
    said = asked_needed(19, 20)
    assert said.startswith("about 100 distinct questions asked (one in 5 is held out; 19")
    assert "150 asked reached p 0.06" in said and asked_needed(1, 2).startswith("about 25 ")
