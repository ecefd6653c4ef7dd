"""The chain retriever's public API (``tttembed.chain.api``) on the tiny dataset."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.chain.conftest import CHAINS, DOCS, Stages
from tttembed.chain import api
from tttembed.core.errors import ConfigError, DataError

TINY = dict(max_seq_length=48)
TRAIN = dict(epochs=1, batch_size=4, n_neg=4, seed=3, split="test", **TINY)


def test_importing_the_api_stays_light():
    code = ("import sys, tttembed.chain.api, tttembed.chain; "
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'peft') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_names_and_defaults_match_the_cli():
    import inspect

    assert set(api.__all__) >= {"chain_search", "chain_train", "chain_eval",
                                "ChainSearchResult"}
    search = inspect.signature(api.chain_search).parameters
    assert search["split"].default == "test" and search["beam"].default == 1
    assert search["steps"].default is None and search["max_seq_length"].default is None
    assert search["state"].default is None  # each: the encoder's own record
    train = inspect.signature(api.chain_train).parameters
    assert (train["regime"].default, train["split"].default, train["epochs"].default,
            train["batch_size"].default, train["lr"].default, train["n_neg"].default) == \
        ("gold", "train", 3, 32, 2e-4, 32)
    ev = inspect.signature(api.chain_eval).parameters
    assert ev["beam"].default == 4 and dict(ev["encoders"].default) == {}
    for fn in (api.chain_search, api.chain_train, api.chain_eval):
        params = inspect.signature(fn).parameters.values()
        assert all(p.kind is p.KEYWORD_ONLY for p in params
                   if p.name not in ("data", "out"))
        assert ">>>" in (fn.__doc__ or "")


def test_chain_search_returns_metrics_a_run_and_progress_totals(tiny_data, tmp_path):
    stages = Stages()
    res = api.chain_search(tiny_data, index=tmp_path / "idx", progress=stages, steps=0, **TINY)
    assert res.steps == 3 and res.beam == 1 and res.qids == tuple(q for q, _, _ in CHAINS)
    assert res.metrics["all"]["n"] == len(CHAINS) and set(res.metrics["by_hops"]) == {2, 3}
    assert 0 <= res.metrics["all"]["C@5"] <= 100
    # totals are real, and every bar reaches its total
    assert stages.totals["embedding passages"] == len(DOCS)
    assert stages.totals["chain steps"] == 3 * len(CHAINS)
    assert stages.done == stages.totals
    run = res.to_run()
    assert set(run) == {q for q, _, _ in CHAINS}
    first = sorted(run["q1"], key=lambda d: -run["q1"][d])[:3]
    assert first == [res.doc_ids[int(r)] for r in res.run.picked[0]]
    # the index now exists: no embedding stage the second time
    again = Stages()
    beam = api.chain_search(tiny_data, index=tmp_path / "idx", beam=2, steps=2,
                            max_questions=2, progress=again, **TINY)
    assert "embedding passages" not in again.totals
    assert again.totals["chain steps"] == again.done["chain steps"] == 2 * 2
    assert beam.run.picked.shape == (2, 2) and len(beam.to_run()) == 2


def test_chain_search_with_a_trained_encoder(tiny_data, gold_checkpoint, tmp_path):
    untrained = api.chain_search(tiny_data, index=tmp_path / "idx", steps=0, **TINY)
    trained = api.chain_search(tiny_data, index=tmp_path / "idx",
                               encoder=gold_checkpoint[0], **TINY)   # its T: 3
    assert trained.run.picked.shape == untrained.run.picked.shape
    with pytest.raises(DataError, match="chain encoder checkpoint"):
        api.chain_search(tiny_data, index=tmp_path / "idx", encoder=tmp_path, **TINY)


def test_chain_train_validates_before_any_work(tiny_data, tmp_path):
    with pytest.raises(ConfigError, match="unknown regime 'magic'.*gold.*on-policy"):
        api.chain_train(tiny_data, tmp_path / "x", regime="magic")
    with pytest.raises(ConfigError, match="states-from"):
        api.chain_train(tiny_data, tmp_path / "x", regime="static")
    with pytest.raises(DataError, match="does not exist"):
        api.chain_train(tiny_data, tmp_path / "x", regime="static",
                        states_from=tmp_path / "nope")
    with pytest.raises(ConfigError, match="epochs"):
        api.chain_train(tiny_data, tmp_path / "x", epochs=0)
    assert not (tmp_path / "x").exists()


def test_chain_train_writes_resumes_and_refuses(tiny_data, tmp_path):
    out = tmp_path / "gold"
    stages = Stages()
    result = api.chain_train(tiny_data, out, index=tmp_path / "idx", progress=stages, **TRAIN)
    assert result.epochs_done == 1 and (out / "manifest.json").is_file()
    n_states = result.history[0]["gold_states"]
    assert stages.totals["epoch 1/1: batches"] == -(-n_states // 4)
    assert stages.done["epoch 1/1: batches"] == stages.totals["epoch 1/1: batches"]
    same = api.chain_train(tiny_data, out, index=tmp_path / "idx", **TRAIN)
    assert same.history == result.history                       # finished: nothing to do
    with pytest.raises(ConfigError, match="another configuration"):
        api.chain_train(tiny_data, out, index=tmp_path / "idx", **{**TRAIN, "lr": 1e-3})
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a chain encoder checkpoint"):
        api.chain_train(tiny_data, other, index=tmp_path / "idx", **TRAIN)
    assert (other / "todo.txt").read_text() == "mine"


def test_chain_eval_writes_the_report_and_refuses_to_overwrite(tiny_data, gold_checkpoint,
                                                               tmp_path):
    out = tmp_path / "report"
    stages = Stages()
    results = api.chain_eval(tiny_data, out, encoders={"gold": gold_checkpoint[0]}, beam=2,
                             index=tmp_path / "idx", progress=stages, **TINY)
    assert {"single-shot (untrained)", "chain (untrained)", "chain (gold)",
            "beam2 (gold)"} == set(results["systems"])
    assert results["recovery"]["reference"] == "gold"
    saved = json.loads((out / "results.json").read_text())
    assert saved["results"]["systems"].keys() == results["systems"].keys()
    assert saved["config"]["encoders"] == {"untrained": None, "gold": str(gold_checkpoint[0])}
    assert sorted(p.name for p in out.iterdir()) == sorted(api_report_files())
    for name in ("chain search: untrained", "chain search: gold", "beam search: gold"):
        assert stages.totals[name] == 3 * len(CHAINS) == stages.done[name]
    assert stages.totals["recovery analyses"] == 2 == stages.done["recovery analyses"]
    with pytest.raises(ConfigError, match="already exists"):
        api.chain_eval(tiny_data, out, index=tmp_path / "idx", **TINY)
    with pytest.raises(ConfigError, match="reserved"):
        api.chain_eval(tiny_data, tmp_path / "r2", encoders={"untrained": gold_checkpoint[0]})
    with pytest.raises(ConfigError, match="unknown encoder name 'nope'"):
        api.chain_eval(tiny_data, tmp_path / "r2", reference="nope")
    assert not (tmp_path / "r2").exists()


def api_report_files():
    from tttembed.chain.report import REPORT_FILES

    return REPORT_FILES


@pytest.fixture(scope="module")
def eval_results(tiny_data, tmp_path_factory):
    """(config, results) of an untrained-only evaluation of the tiny dataset."""
    from tttembed.chain.setup import load

    tmp = tmp_path_factory.mktemp("evalres")
    loaded = load(tiny_data, "test", tmp / "idx")
    results = api.run_chain_eval(loaded, [("untrained", None)], beam=1, reference="untrained",
                                 max_seq_length=48)
    return {"data": str(tiny_data), "split": "test", "steps": 3, "n_questions": 4}, results


def test_a_failing_report_writer_leaves_the_old_folder(eval_results, tmp_path, monkeypatch):
    from tttembed.chain import report

    config, results = eval_results
    out = tmp_path / "report"
    written = report.write_chain_report(out, config, results)
    assert [p.name for p in written] == list(report.REPORT_FILES)
    old = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*a, **k):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report, "line_plot", broken)
    with pytest.raises(RuntimeError, match="plotting failed"):
        report.write_chain_report(out, {**config, "n_questions": 99}, results)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
    assert [p.name for p in tmp_path.iterdir()] == ["report"]      # no temporary left
    with pytest.raises(RuntimeError):
        report.write_chain_report(tmp_path / "fresh", config, results)
    assert not (tmp_path / "fresh").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


def test_a_failing_eval_writes_no_report(tiny_data, tmp_path, monkeypatch):
    from tttembed.chain import report

    def broken(*a, **k):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report, "bar_plot", broken)
    with pytest.raises(RuntimeError):
        api.chain_eval(tiny_data, tmp_path / "report", beam=1, index=tmp_path / "idx",
                       max_questions=2, **TINY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


@pytest.mark.parametrize("change", [{"target_modules": ["no_such_module"]}, {"r": 5}])
def test_an_adapter_that_does_not_fit_the_base_model_is_one_error(gold_checkpoint, tmp_path,
                                                                   change):
    """A LoRA adapter whose config does not match the base model (modules it does not
    have, another rank than its weights) is a ConfigError naming the folder and the fix,
    not PEFT's traceback."""
    import json
    import shutil

    from tttembed.chain.checkpoint import load_encoder
    from tttembed.core.errors import ConfigError

    ckpt = tmp_path / "ckpt"
    shutil.copytree(gold_checkpoint[0], ckpt)
    config = ckpt / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **change}))
    with pytest.raises(ConfigError, match="does not fit the base model") as info:
        load_encoder(ckpt)
    assert str(ckpt / "adapter") in str(info.value) and "chain train" in str(info.value)
    assert "\n" not in str(info.value)
