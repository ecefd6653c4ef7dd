"""``eval`` says its grid and what it will cost before it starts: budgets x scopes x
methods x tasks, and the judge pairs the largest budget pays (the smaller budgets' pairs
are nested in it), capped by the candidates there are."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.evaluation.evaldata import write_task
from tttembed.cli import app
from tttembed.core.errors import ConfigError


@pytest.fixture
def stopped(monkeypatch):
    """``evaluate`` that stops at once: what is printed before it is what eval says first."""
    import tttembed.api

    def stop(*args, **kwargs):
        raise ConfigError("stopped by the test before any work")

    monkeypatch.setattr(tttembed.api, "evaluate", stop)


def test_eval_without_budget_says_the_whole_grid_and_its_cost_first(tmp_path, stopped):
    task = write_task(tmp_path, "beta", ["bio", "sea", "rail"])  # 9 queries, 18 documents
    got = CliRunner().invoke(app, ["eval", str(task), "--scorer", "bm25", "--scope",
                                   "global,task"])
    text = " ".join(got.output.split())
    assert got.exit_code == 1 and "stopped by the test" in text
    assert text.index("grid:") < text.index("stopped by the test")
    assert "12 budgets (0.01 to 100; no --budget: the whole grid)" in text
    assert "2 scopes (global, task)" in text and "1 task (beta: 9 queries)" in text
    # b = 100 wants 900 pairs; 9 queries x 18 candidates = 162 exist
    assert "judge pairs: at most 162 for bm25" in text
    assert "based on" in text


def test_a_budget_grid_is_priced_by_its_largest_budget(tmp_path, stopped):
    task = write_task(tmp_path, "beta", ["bio", "sea", "rail"])
    got = CliRunner().invoke(app, ["eval", str(task), "--scorer", "bm25", "--budget", "1,2",
                                   "--scorer", "qrels"])
    text = " ".join(got.output.split())
    assert "2 budgets (1 to 2)" in text
    assert "judge pairs: at most 18 for bm25" in text  # round(2 x 9 rewarded queries)
    assert "qrels: free (labels)" in text


def test_the_held_out_protocol_is_priced_at_its_depth_not_the_budgets(tmp_path, stopped):
    """Held-out learns 80% of the queries at depth 10 whatever --budget says: the grid
    says so and prices 8 x 10 pairs, not a budget's."""
    task = write_task(tmp_path, "beta", ["bio", "sea", "rail"])  # 9 queries, 18 documents
    got = CliRunner().invoke(app, ["eval", str(task), "--scorer", "bm25", "--protocol",
                                   "heldout", "--scope", "task"])
    text = " ".join(got.output.split())
    assert "grid: depth 10 (--budget applies to the fixed protocol only)" in text
    assert "judge pairs: at most 80 for bm25" in text and "heldout: 10 per rewarded query" in text
    got = CliRunner().invoke(app, ["eval", str(task), "--scorer", "bm25", "--protocol",
                                   "fixed,heldout", "--budget", "1"])
    text = " ".join(got.output.split())
    assert "1 budget (1; the fixed protocol's, the others learn at depth 10)" in text
    assert "judge pairs: at most 89 for bm25" in text  # 9 (b = 1) + 80


def test_the_held_out_protocol_with_a_train_split_is_priced_on_the_train_queries(
        tmp_path, stopped):
    """With --train-split the held-out protocol learns from every train query of a task
    that has the split (6 here, none of them test queries) and from 80% of the test
    queries of one that has not: the estimate prices those, not 80% of the test queries."""
    task = write_task(tmp_path, "alpha", ["bio", "sea", "rail"], train=True)  # 9 test, 6 train
    got = CliRunner().invoke(app, ["eval", str(task), "--scorer", "bm25", "--protocol",
                                   "heldout", "--scope", "task", "--train-split", "train"])
    text = " ".join(got.output.split())
    assert "judge pairs: at most 60 for bm25" in text, text
    plain = write_task(tmp_path / "b", "beta", ["bio", "sea", "rail"])  # no train split
    got = CliRunner().invoke(app, ["eval", str(plain), "--scorer", "bm25", "--protocol",
                                   "heldout", "--scope", "task", "--train-split", "train"])
    assert "judge pairs: at most 80 for bm25" in " ".join(got.output.split())
