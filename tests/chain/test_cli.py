from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from tttembed import api
from tttembed.chain.regimes import REGIMES
from tttembed.cli.chain import LEGEND, app

runner = CliRunner()


def _invoke(args):
    return runner.invoke(app, args, catch_exceptions=False)


def _fractions(output):
    """The metric cells of the console tables (0-1 with 4 decimals)."""
    return [float(x) for x in re.findall(r"\b\d\.\d{4}\b", output)]


def test_search_prints_fractions_and_writes_a_run(tiny_data, tmp_path):
    out = tmp_path / "run.jsonl"
    res = _invoke(["search", str(tiny_data), "--index", str(tmp_path / "idx"),
                   "--max-seq-length", "48", "--out", str(out), "--quiet", "--steps", "0"])
    assert res.exit_code == 0, res.output
    assert "C@5" in res.output and "2-hop" in res.output and "T=3" in res.output
    assert LEGEND.split(";")[0] in " ".join(res.output.split())
    values = _fractions(res.output)
    assert values and all(0.0 <= v <= 1.0 for v in values)
    run = api.read_run(out)
    assert set(run) == {"q1", "q2", "q3", "q4"}
    ranked = sorted(run["q2"], key=lambda d: -run["q2"][d])
    assert len(ranked) == 12 and len(set(ranked)) == 12
    beam = _invoke(["search", str(tiny_data), "--index", str(tmp_path / "idx"),
                    "--beam", "2", "--steps", "2", "--quiet"])
    assert beam.exit_code == 0 and "beam 2" in beam.output and "T=2" in beam.output
    doc = _invoke(["search", str(tiny_data), "--index", str(tmp_path / "idx"),
                   "--max-seq-length", "48", "--quiet", "--json"])
    assert doc.exit_code == 0, doc.output
    got = json.loads(doc.stdout)  # one document on stdout, the tables went to stderr
    assert got["steps"] == 2 and set(got["metrics"]) >= {"all", "by_hops"}  # as served
    assert 0 <= got["metrics"]["all"]["C@5"] <= 100


def test_train_then_eval_writes_the_report(tiny_data, tmp_path):
    idx = str(tmp_path / "idx")
    common = ["--index", idx, "--max-seq-length", "48", "--quiet"]
    gold = tmp_path / "gold"
    res = _invoke(["train", str(tiny_data), "--out", str(gold), "--split", "test",
                   "--epochs", "1", "--batch-size", "4", "--n-neg", "4", *common])
    assert res.exit_code == 0, res.output
    assert "epoch 1" in res.output and (gold / "manifest.json").is_file()
    res = _invoke(["train", str(tiny_data), "--out", str(gold), "--split", "test",
                   "--epochs", "1", "--batch-size", "4", "--n-neg", "5", *common])
    assert res.exit_code == 1 and "another configuration" in res.output
    op = tmp_path / "op"
    res = _invoke(["train", str(tiny_data), "--out", str(op), "--split", "test",
                   "--regime", "on-policy", "--states-from", str(gold), "--epochs", "1",
                   "--batch-size", "4", "--n-neg", "4", *common])
    assert res.exit_code == 0, res.output
    rep = tmp_path / "report"
    args = ["eval", str(tiny_data), "--out", str(rep), "--encoder", f"gold={gold}",
            "--encoder", f"on-policy={op}", "--beam", "2", *common]
    res = _invoke(args)
    assert res.exit_code == 0, res.output
    assert "chain (on-policy)" in res.output and "report written" in res.output
    assert all(0.0 <= v <= 1.0 for v in _fractions(res.output))
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
    # the report folder is refused a second time without --overwrite, replaced with it
    before = (rep / "results.json").read_text()
    res = _invoke(args)
    assert res.exit_code == 1 and "already exists" in res.output and "--overwrite" in res.output
    assert (rep / "results.json").read_text() == before
    res = _invoke([*args, "--overwrite", "--max-questions", "2"])
    assert res.exit_code == 0, res.output
    assert json.loads((rep / "results.json").read_text())["config"]["n_questions"] == 2


def test_user_mistakes_exit_with_one_line(tiny_data, tmp_path):
    res = _invoke(["train", str(tiny_data), "--out", str(tmp_path / "x"), "--regime", "magic"])
    assert res.exit_code == 1 and "unknown regime 'magic'" in res.output
    assert all(r in res.output for r in REGIMES)
    assert not (tmp_path / "x").exists()
    res = _invoke(["train", str(tiny_data), "--out", str(tmp_path / "x"), "--split", "test",
                   "--regime", "on-policy", "--index", str(tmp_path / "idx"), "--quiet"])
    assert res.exit_code == 1 and "states-from" in res.output
    res = _invoke(["search", str(tmp_path / "nope"), "--quiet"])
    assert res.exit_code == 1 and "does not exist" in res.output
    res = _invoke(["search", str(tiny_data), "--split", "dev", "--quiet"])
    assert res.exit_code == 1 and "available splits" in res.output
    res = _invoke(["eval", str(tiny_data), "--out", str(tmp_path / "r"), "--encoder", "=x"])
    assert res.exit_code == 2 and "CHECKPOINT or NAME=CHECKPOINT" in res.output
    res = _invoke(["eval", str(tiny_data), "--out", str(tmp_path / "r"), "--encoder",
                   str(tmp_path / "bad")])  # a bare CHECKPOINT, as chain search takes it
    assert res.exit_code == 1 and "bad" in res.output and not (tmp_path / "r").exists()
    res = _invoke(["eval", str(tiny_data), "--out", str(tmp_path / "r"), "--encoder",
                   f"untrained={tmp_path}"])
    assert res.exit_code == 1 and "reserved" in res.output
    res = _invoke(["eval", str(tiny_data), "--out", str(tmp_path / "r"), "--encoder",
                   f"gold={tmp_path / 'missing'}"])
    assert res.exit_code == 1 and "does not exist" in res.output


def test_eval_refuses_an_existing_out_before_any_work(tiny_data, tmp_path, monkeypatch):
    import tttembed.chain.api as chain_api

    def boom(*a, **k):
        raise AssertionError("loaded data although the report folder is refused")

    monkeypatch.setattr(chain_api, "load", boom)
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    res = _invoke(["eval", str(tiny_data), "--out", str(out), "--quiet"])
    assert res.exit_code == 1 and "already exists" in res.output
    assert (out / "keep.txt").read_text() == "old"


def test_every_option_has_help_and_quiet_has_no_short_form():
    import typer.main

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        for param in cmd.params:
            assert getattr(param, "help", None), (name, param.name)
            if param.name == "quiet":
                assert param.opts == ["--quiet"] and not param.secondary_opts
        assert "overwrite" in {p.name for p in cmd.params} or name == "search"
    assert "encoder" in {p.name for p in group.commands["search"].params}


def test_the_cli_module_imports_no_heavy_library():
    import ast
    import inspect

    import tttembed.cli.chain as module

    tree = ast.parse(inspect.getsource(module))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m and m.startswith("tttembed")}
    assert ours <= {"tttembed", "tttembed.chain.regimes", "tttembed.chain.forms",
                    "tttembed.core.io",
                    "tttembed.embed.base"} | {
        m for m in ours if m.startswith("tttembed.cli.")}
    assert not {m for m in imported if m and m.split(".")[0] not in
                {"tttembed", "typer", "rich", "__future__", "collections", "pathlib",
                 "typing"}}
