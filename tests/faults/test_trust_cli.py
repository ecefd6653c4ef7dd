"""Machine-readable means machine-readable (issue 38, section 3): every command that has
``--json`` prints exactly one JSON document on stdout, in success and in failure (then
``{"error": ...}``); a closed stdout ends a command quietly.

The commands are enumerated from the typer app, so a command that gains ``--json`` must
get its two cases in :data:`CASES` (the first test fails otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tests.cli.test_cli import CORPUS, QRELS, QUERIES, _write_beir
from tests.faults.conftest import ROOT, env
from tttembed.cli import app


def json_commands() -> set[str]:
    """Every command of the app (``state show``, ``chain search`` ...) with ``--json``."""
    found: set[str] = set()

    def walk(cmd: Any, prefix: tuple[str, ...]) -> None:
        if hasattr(cmd, "commands"):  # a group (typer ships its own click)
            for name, sub in cmd.commands.items():
                walk(sub, (*prefix, name))
        elif any("--json" in p.opts for p in cmd.params):
            found.add(" ".join(prefix))

    walk(typer.main.get_command(app), ())
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory, minilm) -> dict[str, Path]:
    """A BEIR folder, its index, a state, two run files, a registry with two versions,
    eval tasks and a multi-hop folder: what every ``--json`` command needs to succeed."""
    from tests.chain.conftest import write_dataset
    from tests.evaluation.evaldata import write_tasks
    from tttembed.adapt.state import load_state
    from tttembed.registry.versions import Registry

    root = tmp_path_factory.mktemp("json")
    data = _write_beir(root / "data", CORPUS, QUERIES, QRELS)
    runner = CliRunner()
    for args in (["index", str(data), "--out", str(root / "idx")],
                 ["learn", str(data), "--index", str(root / "idx"), "--scorer",
                  f"qrels:{data / 'qrels' / 'test.tsv'}", "--budget", "2", "--out",
                  str(root / "s.npz")],
                 ["search", str(data), "--index", str(root / "idx"), "--out",
                  str(root / "a.trec")]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
    reg = Registry(root / "reg", create=True, index={"identity": "x"})
    state = load_state(root / "s.npz")
    reg.register(state, parent=None, reason="one")
    reg.register(state, parent="v1", reason="two")
    from tttembed.loop.open import open_store
    from tttembed.loop.rows import SearchLog

    store = open_store(None, root / "reg")  # the registry's feedback store, one search
    store.log_searches([SearchLog("s1", "t", "a question", 1.0, None, ("d1",),
                                  session="s-1")])
    store.close()
    write_dataset(root / "chain")
    return {"root": root, "data": data, "idx": root / "idx", "state": root / "s.npz",
            "run": root / "a.trec", "reg": root / "reg",
            "tasks": write_tasks(root / "tasks"), "chain": root / "chain"}


def _cases(w: dict[str, Path]) -> dict[str, tuple[list[str], list[str]]]:
    """command -> (arguments that succeed, arguments that fail), each without --json."""
    d, i, nope = str(w["data"]), str(w["idx"]), str(w["root"] / "nope")
    qrels = str(w["data"] / "qrels" / "test.tsv")
    scorer = f"qrels:{qrels}"
    return {
        "search": (["search", d, "--index", i], ["search", d, "--index", nope]),
        "learn": (["learn", d, "--index", i, "--scorer", scorer, "--budget", "2",
                   "--method", "auto", "--dry-run"],
                  ["learn", d, "--index", nope, "--scorer", scorer, "--dry-run"]),
        "rerank": (["rerank", d, "--index", i, "--scorer", scorer, "--budget", "2"],
                   ["rerank", d, "--index", i, "--scorer", "nope:x"]),
        "eval": (["eval", "alpha", "--data-root", str(w["tasks"]), "--scorer", "bm25",
                  "--budget", "1", "--scope", "task", "--baselines", "direct",
                  "--protocol", "fixed", "--resamples", "20", "--cache-dir",
                  str(w["root"] / "evalcache")],
                 ["eval", "nope", "--data-root", str(w["tasks"])]),
        "compare": (["compare", str(w["run"]), str(w["run"]), "--qrels", qrels],
                    ["compare", str(w["run"]), nope, "--qrels", qrels]),
        "index-show": (["index", "show", i], ["index", "show", nope]),
        "state show": (["state", "show", str(w["state"])], ["state", "show", nope]),
        "states list": (["states", "list", str(w["reg"])], ["states", "list", nope]),
        "states show": (["states", "show", str(w["reg"]), "v1"],
                        ["states", "show", str(w["reg"]), "v9"]),
        "states diff": (["states", "diff", str(w["reg"]), "v1", "v2"],
                        ["states", "diff", str(w["reg"]), "v1", "v9"]),
        "chain search": (["chain", "search", str(w["chain"]), "--index",
                          str(w["root"] / "chainidx"), "--max-seq-length", "48", "--quiet"],
                         ["chain", "search", nope, "--quiet"]),
        "chain eval": (["chain", "eval", str(w["chain"]), "--index",
                        str(w["root"] / "chainidx"), "--max-seq-length", "48", "--quiet",
                        "--out", str(w["root"] / "chainrep"), "--overwrite"],
                       ["chain", "eval", nope, "--out", str(w["root"] / "r2"), "--quiet"]),
        "store stats": (["store", "stats", str(w["reg"]), "--registry", str(w["reg"])],
                        ["store", "stats", nope]),
        "store prune": (["store", "prune", str(w["reg"]), "--dry-run"],
                        ["store", "prune", str(w["reg"]), "--older-than", "soon"]),
        "store forget": (["store", "forget", str(w["reg"]), "--session", "s-1", "--dry-run"],
                         ["store", "forget", str(w["reg"]), "--session", "nobody"]),
    }


CASES = ("search", "learn", "rerank", "eval", "compare", "index-show", "state show",
         "states list", "states show", "states diff", "chain search", "chain eval",
         "store stats", "store prune", "store forget")


def test_every_command_with_json_has_its_cases_here():
    """Every command that has --json is listed here (enumerated from the typer app), so
    that each is checked in success and in failure."""
    assert json_commands() == set(CASES)


def _one_document(r) -> dict:
    text = r.stdout
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not one JSON document ({exc}): {text[:600]!r}"
                             ) from None
    assert isinstance(doc, dict), text
    return doc


@pytest.mark.parametrize("command", CASES)
def test_json_stdout_is_one_document_in_success_and_failure(world, command):
    """`CMD --json` prints exactly one JSON document on stdout when it succeeds and
    `{"error": ...}` (one document, exit non-zero) when it fails; messages go to stderr."""
    ok, bad = _cases(world)[command]
    runner = CliRunner()
    r = runner.invoke(app, [*ok, "--json"])
    assert r.exit_code == 0, r.output
    assert "error" not in _one_document(r)
    r = runner.invoke(app, [*bad, "--json"])
    assert r.exit_code != 0, r.output
    doc = _one_document(r)
    assert set(doc) == {"error"} and doc["error"], doc


def test_dry_run_json_shows_learning_and_validation_pairs(world):
    """`learn --dry-run --json --method auto`: the plan on stdout is the JSON document
    alone, and it counts the validation pairs --method auto will pay beside the learning
    pairs (text and JSON)."""
    ok, _ = _cases(world)["learn"]
    ok = [*ok, "--validate-budget", "1"]  # one validation pair per query at most
    r = CliRunner().invoke(app, [*ok, "--json"])
    doc = _one_document(r)
    assert doc["pairs"]["validation_cap"] > 0, doc
    r = CliRunner().invoke(app, ok)
    cap = doc["pairs"]["validation_cap"]
    assert f"at most {cap:,} more pairs" in r.stdout and "reward plan" in r.stdout, r.stdout


def test_a_usage_error_with_json_is_one_document():
    """An unknown option on a `--json` line is one `{"error": ...}` document on stdout
    and click's usage message on stderr (exit 2)."""
    r = CliRunner().invoke(app, ["compare", "a", "b", "--qrels", "q", "--nope", "--json"])
    assert r.exit_code == 2
    assert "nope" in _one_document(r)["error"]


def test_a_closed_stdout_ends_quietly(world):
    """`tttembed states list REG | head -0` (the reader has closed the pipe): exit 0 or
    141, nothing on stderr (never 'Broken pipe (check the path and its permissions)')."""
    read, write = os.pipe()
    os.close(read)  # every write to stdout is EPIPE
    code = ("from tttembed.cli import main; import sys; "
            f"sys.argv = ['tttembed', 'states', 'list', {str(world['reg'])!r}]; main()")
    try:
        proc = subprocess.run([sys.executable, "-c", code], stdout=write,
                              stderr=subprocess.PIPE, cwd=ROOT, env=env(), timeout=120)
    finally:
        os.close(write)
    err = proc.stderr.decode()
    assert proc.returncode in (0, 141), (proc.returncode, err)
    assert "Broken pipe" not in err and "Traceback" not in err, err


def test_old_spellings_work_after_the_root_threads_option(world):
    """`tttembed --threads 1 search --queries DATA ...` (an old spelling after the root
    option, or with --threads after the command) is rewritten with its note, as without
    --threads."""
    for args in (["--threads", "1", "search", "--queries", str(world["data"])],
                 ["search", "--threads", "1", "--queries", str(world["data"])]):
        r = CliRunner().invoke(app, [*args, "--index", str(world["idx"]), "--quiet"])
        assert r.exit_code == 0, r.output
        assert "note: --queries is an old spelling" in r.output, r.output


def test_states_show_prints_the_versions_manifest(world):
    """`states show REG VERSION` prints the version's manifest, every field and nothing
    else (text and --json)."""
    from tttembed.registry.versions import Registry

    manifest = dict(Registry(world["reg"]).get("v2").manifest)
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(app, ["states", "show", str(world["reg"]), "v2", *extra])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout) == json.loads(json.dumps(manifest)), r.stdout
