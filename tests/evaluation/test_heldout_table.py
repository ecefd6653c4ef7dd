"""`eval -p heldout`: the grid line names the methods the protocol runs (not direct and
rw-rocchio, which equal raw on unseen queries), its table has no empty "vs direct"
column, `b` is rounded, and with `--train-split` the rows say what they learned from
instead of `fraction=0.8`."""

from __future__ import annotations

from typer.testing import CliRunner

from tests.evaluation.evaldata import write_task, write_tasks
from tests.evaluation.test_grid import stopped  # noqa: F401  (fixture)
from tests.fakes import HashEmbedder
from tttembed.cli import app
from tttembed.embed.cache import CachedEmbedder
from tttembed.evaluation.config import EvalConfig
from tttembed.evaluation.results import EvalReport
from tttembed.evaluation.runner import run_eval


def test_the_grid_line_names_what_heldout_runs(tmp_path, stopped):  # noqa: F811
    """Before: `3 methods per budget: task, direct, rw-rocchio`."""
    task = write_task(tmp_path, "beta", ["bio", "sea", "rail"])
    got = CliRunner().invoke(app, ["eval", str(task), "--protocol", "heldout", "--scope",
                                   "task"])
    text = " ".join(got.output.split())
    assert "1 learned cell (1 method per budget: task)" in text, text
    assert "direct" not in text.split("judge pairs")[0]
    got = CliRunner().invoke(app, ["eval", str(task), "--protocol", "fixed,heldout",
                                   "--scope", "task", "--budget", "1"])
    text = " ".join(got.output.split())
    assert ("methods per budget: fixed: task, direct, rw-rocchio; heldout: task)") in text, text
    assert "4 learned cells" in text


def test_the_heldout_table_has_no_empty_column_and_says_its_train_split(tmp_path):
    """Before: a "vs direct" column empty in every row, `b` = `8.00143`-like, and
    `fraction=0.8` on rows learned from the train split."""
    from tttembed.evaluation.render import budget_text

    data = write_tasks(tmp_path / "data")
    cache = tmp_path / "cache"
    cfg = EvalConfig(tasks=("alpha",), data_root=str(data), cache_dir=str(cache),
                     scorers=("bm25",), protocols=("heldout",), scopes=("task",),
                     baselines=("direct", "rw-rocchio"), train_split="train",
                     n_resamples=10)
    report = EvalReport(run_eval(cfg, embedder=CachedEmbedder(HashEmbedder(), cache)))
    [(title, head, rows)] = report.tables()
    assert title.startswith("Held-out") and "vs direct: p [95% CI]" not in head, head
    assert len(head) == len(rows[0])
    assert [r[0].split(" (")[0] for r in rows] == ["raw", "prf-avg", "prf-rocchio", "task"]
    assert all("fraction" not in r[0] and "learned from=train split" in r[0] for r in rows)
    assert all(r[1] == budget_text(float(r[1])) for r in rows)
    assert budget_text(8.00143) == "8" and budget_text(0.01) == "0.01"
    assert budget_text(12.5) == "12.5" and budget_text(2500.4) == "2,500"
