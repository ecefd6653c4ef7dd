from __future__ import annotations

import pytest

from tttembed.core.errors import ConfigError, DataError, MissingDependency
from tttembed.evaluation.tasks import load_eval_task, load_eval_tasks, load_mteb_task

from .evaldata import write_task, write_tasks


def test_task_by_name_under_root_and_by_path(tmp_path):
    root = write_tasks(tmp_path / "data")
    by_name = load_eval_task("beta", data_root=root)
    by_path = load_eval_task(str(root / "beta"))
    assert by_name.name == by_path.name == "beta"
    assert by_name.fingerprint == by_path.fingerprint and len(by_name.fingerprint) == 64
    assert len(by_name.queries) == 9 and by_name.n_judged == 9
    assert not by_name.train_queries and by_name.train_split is None


def test_train_split_queries_are_disjoint_from_test(tmp_path):
    root = write_tasks(tmp_path / "data")
    t = load_eval_task("alpha", data_root=root, train_split="train")
    assert t.train_split == "train" and len(t.train_queries) == 6
    assert not set(t.train_queries) & set(t.queries)
    assert set(t.train_qrels) == set(t.train_queries)
    # a task without that split simply has no train queries
    assert not load_eval_task("beta", data_root=root, train_split="train").train_queries


def test_unjudged_queries_are_not_evaluated(tmp_path):
    path = write_task(tmp_path, "gamma", ["astro", "cook"])
    tsv = path / "qrels" / "test.tsv"
    lines = tsv.read_text().splitlines()
    tsv.write_text("\n".join([lines[0]] + [ln if not ln.startswith("astro-q0") else
                                            ln.rsplit("\t", 1)[0] + "\t0" for ln in lines[1:]]))
    t = load_eval_task(str(path))
    assert "astro-q0" not in t.queries and len(t.queries) == 5


def test_errors(tmp_path):
    root = write_tasks(tmp_path / "data")
    with pytest.raises(DataError, match="no dataset 'nope'"):
        load_eval_task("nope", data_root=root)
    with pytest.raises(ConfigError, match="repeat"):
        load_eval_tasks(["beta", str(root / "beta")], data_root=root)
    with pytest.raises(ConfigError):
        load_eval_tasks([])


def test_mteb_names_offline_are_a_clear_error():
    try:
        import mteb  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependency, match="mteb"):
            load_mteb_task("SciFact", online=lambda: False)
        return
    with pytest.raises(DataError, match="offline"):
        load_mteb_task("SciFact", online=lambda: False)
