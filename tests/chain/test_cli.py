from __future__ import annotations

import json

from typer.testing import CliRunner

from tttembed.cli.chain import app

runner = CliRunner()


def _invoke(args):
    return runner.invoke(app, args, catch_exceptions=False)


def test_search_prints_metrics_and_writes_a_run(tiny_data, tmp_path):
    out = tmp_path / "run.json"
    res = _invoke(["search", str(tiny_data), "--index", str(tmp_path / "idx"),
                   "--max-seq-length", "48", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert "C@5" in res.output and "2-hop" in res.output
    run = json.loads(out.read_text())
    assert set(run) == {"q1", "q2", "q3", "q4"}
    ranked = sorted(run["q2"], key=lambda d: -run["q2"][d])
    assert len(ranked) == 12 and len(set(ranked)) == 12
    beam = _invoke(["search", str(tiny_data), "--index", str(tmp_path / "idx"),
                    "--beam", "2", "--steps", "2", "-q"])
    assert beam.exit_code == 0 and "beam 2" in beam.output


def test_train_then_eval_writes_the_report(tiny_data, tmp_path):
    idx = str(tmp_path / "idx")
    common = ["--index", idx, "--max-seq-length", "48", "-q"]
    gold = tmp_path / "gold"
    res = _invoke(["train", str(tiny_data), "--out", str(gold), "--split", "test",
                   "--epochs", "1", "--batch-size", "4", "--n-neg", "4", *common])
    assert res.exit_code == 0, res.output
    assert "epoch 1" in res.output and (gold / "manifest.json").is_file()
    op = tmp_path / "op"
    res = _invoke(["train", str(tiny_data), "--out", str(op), "--split", "test",
                   "--regime", "on-policy", "--states-from", str(gold), "--epochs", "1",
                   "--batch-size", "4", "--n-neg", "4", *common])
    assert res.exit_code == 0, res.output
    rep = tmp_path / "report"
    res = _invoke(["eval", str(tiny_data), "--out", str(rep), "--encoder", f"gold={gold}",
                   "--encoder", f"on-policy={op}", "--beam", "2", *common])
    assert res.exit_code == 0, res.output
    for name in ("results.json", "report.md", "completeness.png", "mismatch.png",
                 "recovery.png"):
        assert (rep / name).is_file(), name
    results = json.loads((rep / "results.json").read_text())
    systems = results["results"]["systems"]
    assert {"single-shot (untrained)", "chain (untrained)", "chain (gold)",
            "chain (on-policy)", "beam2 (gold)"} <= set(systems)
    assert results["config"]["reference"] == "gold" and "torch" in results["versions"]
    assert results["config"]["device"].split(":")[0] in ("cpu", "cuda", "mps")
    assert set(results["results"]["recovery"]["by_encoder"]) == {"untrained", "gold",
                                                                 "on-policy"}
    assert "Next-step success" in (rep / "report.md").read_text()


def test_user_mistakes_exit_with_one_line(tiny_data, tmp_path):
    res = _invoke(["train", str(tiny_data), "--out", str(tmp_path / "x"), "--regime", "magic"])
    assert res.exit_code == 2 and "unknown regime" in res.output
    res = _invoke(["train", str(tiny_data), "--out", str(tmp_path / "x"), "--split", "test",
                   "--regime", "on-policy", "--index", str(tmp_path / "idx"), "-q"])
    assert res.exit_code == 1 and "states-from" in res.output
    res = _invoke(["search", str(tmp_path / "nope"), "-q"])
    assert res.exit_code == 1 and "does not exist" in res.output
    res = _invoke(["search", str(tiny_data), "--split", "dev", "-q"])
    assert res.exit_code == 1 and "available splits" in res.output
    res = _invoke(["eval", str(tiny_data), "--out", str(tmp_path / "r"), "--encoder", "bad"])
    assert res.exit_code == 2 and "NAME=CHECKPOINT" in res.output
