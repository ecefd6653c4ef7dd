"""Inspectors that never contradict themselves (issue 38, section 2): every line of
`state show` comes from the manifest of the state's own kind (KD scopes, reward Rocchio,
Qdrant's formula, mixed; guard ran, fell back, absent); the legend under a table names
only what that table holds; `learn`'s groups table has no always-empty column."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tttembed.cli import app

MODULES = ("json", "csv", "re", "pathlib", "shutil", "functools")  # 141 docs, 14 queries


@pytest.fixture(scope="module")
def states(tmp_path_factory, minilm) -> dict[str, Path]:
    """Real states of each kind learned on the tiny demo task (and the learn outputs)."""
    from tttembed.demo import export_demo

    root = tmp_path_factory.mktemp("inspect")
    data = export_demo(root / "tiny", modules=MODULES)
    runner = CliRunner()
    r = runner.invoke(app, ["index", str(data), "--out", str(root / "idx")])
    assert r.exit_code == 0, r.output
    out: dict[str, Path] = {"root": root}
    for name, extra in (("task", ["--scope", "task"]), ("query", ["--scope", "query"]),
                        ("global", ["--scope", "global"]), ("alpha-auto", ["--alpha", "auto"]),
                        ("method-auto", ["--method", "auto"])):
        path = root / f"{name}.npz"
        r = runner.invoke(app, ["learn", str(data), "--index", str(root / "idx"), "--scorer",
                                "qrels", "--budget", "10", "--cache-dir", str(root / "c"),
                                "--out", str(path), *extra])
        assert r.exit_code == 0, r.output
        (root / f"{name}.out").write_text(r.output)
        out[name] = path
    return out


def _show(path: Path) -> tuple[str, dict]:
    runner = CliRunner()
    text = runner.invoke(app, ["state", "show", str(path)])
    assert text.exit_code == 0, text.output
    doc = runner.invoke(app, ["state", "show", str(path), "--json"])
    return text.stdout, json.loads(doc.stdout)


def _line(text: str, label: str) -> str:
    return next(ln.split(":", 1)[1].strip() for ln in text.splitlines()
                if ln.strip().startswith(f"{label}:"))


def _legend(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("n = ") or
                ln.startswith("part = "))


def _edited(src: Path, dst: Path, **changes) -> Path:
    from tttembed.adapt.state import load_state

    replace(load_state(src), **changes).save(dst)
    return dst


@pytest.mark.parametrize("kind", ["task", "query", "global"])
def test_a_kd_scope_state_without_a_guard(states, kind):
    """A --scope state at the rule alpha: `guard: none run` (never a `--crossval` hint, not
    an option), alpha `rule, as asked`, the legend names the rule for its one kind."""
    text, doc = _show(states[kind])
    assert doc["scope"] == kind and doc["alpha_asked"] == "rule"
    assert _line(text, "guard").startswith("none run") and "--crossval" not in text
    assert _line(text, "alpha") == "rule, as asked (n/(n+1))"
    assert _line(text, "scope") == kind
    legend = _legend(text)
    assert f"{kind}: n/(n+1), the rule" in legend and "nDCG" not in legend
    assert "part =" not in legend  # no part column for a one-kind state


def test_an_alpha_auto_state_whose_guard_ran(states):
    """--alpha auto: `guard: ran` with the manifest's validation pairs and cap, and the
    alpha the guard chose, in the alpha line and the legend."""
    text, doc = _show(states["alpha-auto"])
    cv = doc["crossval"]
    assert cv["method"] == "judged-diff"
    guard = _line(text, "guard")
    assert guard.startswith("ran: judged re-search")
    assert (f"validation pairs {cv['validation_pairs_paid']:,} of a cap of "
            f"{cv['validation_cap']:,}") in guard
    assert _line(text, "alpha") == f"auto: the guard chose {doc['alpha_chosen']} (below)"
    assert f"picked alpha {cv['auto']}" in guard


def test_a_guard_that_fell_back_says_why(states, tmp_path):
    """A state whose guard could not run (its record: judged-candidates, with the reason)
    says `fell back` and the reason from its manifest."""
    from tttembed.adapt.state import load_state

    cv = dict(load_state(states["alpha-auto"]).crossval or {})
    cv.update(method="judged-candidates", fallback="fewer than 2 rewarded queries: nothing "
              "to hold out", validation_pairs_paid=0)
    text, _ = _show(_edited(states["alpha-auto"], tmp_path / "fb.npz", crossval=cv))
    assert _line(text, "guard").startswith("fell back (fewer than 2 rewarded queries")


def test_a_method_auto_state(states):
    """--method auto: the guard line is its judged validation (never `none run`), with the
    selection's pairs; the groups table has a part column; the legend names the parts it
    holds and no other."""
    text, doc = _show(states["method-auto"])
    sel = doc["selection"]
    guard = _line(text, "guard")
    assert guard.startswith("ran: method auto's judged validation")
    assert f"validation pairs {sel['validation_pairs_paid']:,} of a cap of" in guard
    assert _line(text, "scope").startswith("mixed")
    legend = _legend(text)
    parts = set(sel["query"].values()) | {v for v in sel["shared"].values() if v != "raw"}
    for name, label in (("rw-rocchio", "reward-weighted Rocchio"),
                        ("qdrant-rf", "Qdrant's formula"), ("query", "query:"),
                        ("task", "task:")):
        assert (label in legend) == (name in parts), (name, legend)


@pytest.mark.parametrize("method", ["rw-rocchio", "qdrant-rf"])
def test_a_mixed_state_of_rocchio_or_qdrant_parts(states, tmp_path, method):
    """A mixed state whose query parts are reward Rocchio or Qdrant's formula (weight 1,
    n = 1): the legend says alpha is 1 for them (never `n/(n+1) by rule`), the groups
    table names the part, the objective line says no KD part was trained."""
    from tttembed.adapt.state import load_state

    s = load_state(states["method-auto"])
    sel = dict(s.selection or {})
    sel.update(query={t: method for t in sel["query"]}, choice={t: method for t in sel["query"]})
    path = _edited(states["method-auto"], tmp_path / f"{method}.npz", selection=sel,
                   alpha=np.ones(len(s.keys)), n_g=np.ones(len(s.keys), np.int64))
    text, _ = _show(path)
    legend = _legend(text)
    assert "1, the vector is the whole offset" in legend and "n/(n+1)" not in legend
    assert f"│ {method}" in text or f"| {method}" in text or method in text.split("groups")[1]
    assert _line(text, "objective").startswith("none: no KD part was chosen")


def test_learns_groups_table_has_no_empty_column_and_its_own_legend(states):
    """`learn`'s groups table of a query-wise or mixed state has no `final loss` column
    (always empty), and the line under it is the groups' legend, not the metrics one."""
    for name in ("query", "method-auto"):
        out = (states["root"] / f"{name}.out").read_text()
        assert "final loss" not in out, out
        table_end = out.index("n = rewarded queries") if "part =" not in out else out.index(
            "part = ")
        assert "nDCG@10, recall@100" not in out[table_end:table_end + 300]


def test_index_show_prints_its_manifest(states):
    """Every line of `index show` is a field of the index's manifest (or the documents it
    counts), as its --json holds."""
    idx = states["root"] / "idx"
    runner = CliRunner()
    text = runner.invoke(app, ["index", "show", str(idx)]).stdout
    doc = json.loads(runner.invoke(app, ["index", "show", str(idx), "--json"]).stdout)
    labels = [ln.split(":", 1)[0].strip() for ln in text.splitlines() if ":" in ln]
    assert labels and set(labels) <= set(doc), (labels, sorted(doc))


def test_the_legend_under_a_metrics_table_names_only_its_columns(states):
    """Under `search`'s metrics tables the legend names the metrics (and the paired
    columns), never b or alpha, which those tables do not hold."""
    root = states["root"]
    r = CliRunner().invoke(app, ["search", str(root / "tiny"), "--index", str(root / "idx"),
                                 "--state", str(states["task"]), "--quiet"])
    assert r.exit_code == 0, r.output
    legends = [ln for ln in r.stdout.splitlines() if ln.startswith("legend:")]
    assert legends, r.stdout
    assert not [ln for ln in legends if "b = " in ln or "alpha" in ln], legends
