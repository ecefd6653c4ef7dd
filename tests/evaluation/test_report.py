from __future__ import annotations

import json

import numpy as np
import pytest

from tttembed.evaluation.protocols import MethodResult
from tttembed.evaluation.report import (
    alpha_regret,
    macro,
    markdown,
    summarise,
    weighted_compare,
    write_report,
)


def _pq(values: dict[str, float]) -> dict[str, dict[str, float]]:
    return {"ndcg@10": dict(values), "recall@100": {k: min(1.0, v + 0.2) for k, v in values.items()}}


RAW = {"a/1": 0.2, "a/2": 0.4, "a/3": 0.6, "b/1": 0.5}


def test_macro_weights_tasks_equally():
    # task a mean 0.4 (3 queries), task b 0.5 (1 query): macro 0.45, not the pooled 0.425
    assert macro(RAW) == pytest.approx(0.45)


def test_weighted_compare_tests_the_macro_delta():
    better = {k: v + (0.1 if k.startswith("a") else 0.3) for k, v in RAW.items()}
    c = weighted_compare(better, RAW, n_resamples=500)
    assert c["delta"] == pytest.approx(macro(better) - macro(RAW))  # 0.2, not pooled 0.15
    assert c["n"] == 4 and c["ci_low"] <= c["delta"] <= c["ci_high"]
    assert weighted_compare({"x/1": 1.0}, RAW) is None


def _results():
    raw = _pq(RAW)
    out = [MethodResult("fixed", "raw", raw)]
    for B, gain in ((1, 0.05), (4, 0.1), (40, 0.1)):
        out.append(MethodResult("fixed", "direct", _pq({k: v + gain / 2 for k, v in RAW.items()}),
                                B / 4, B, {"objective": "kd"}))
        out.append(MethodResult("fixed", "task", _pq({k: v + gain for k, v in RAW.items()}),
                                B / 4, B, {"objective": "kd"}))
    return out


def test_summarise_rows_deltas_tests_and_aubc():
    s = summarise(_results(), _pq(RAW), n_resamples=200, few_queries=2)
    task = [r for r in s["rows"] if r["method"] == "task"]
    assert [r["delta"]["ndcg@10"] for r in task] == pytest.approx([0.05, 0.1, 0.1])
    assert task[0]["vs_direct"]["delta"] == pytest.approx(0.025)
    assert task[0]["tasks"]["a"]["delta_ndcg@10"] == pytest.approx(0.05)
    assert task[0]["tasks"]["b"]["few"] and not task[0]["tasks"]["a"]["few"]
    assert "vs_raw" not in s["rows"][0]
    # AUBC over log b: points b = 0.25, 1, 10 with deltas 0.05, 0.1, 0.1
    lb = np.log([0.25, 1.0, 10.0])
    want = ((0.05 + 0.1) / 2 * (lb[1] - lb[0]) + 0.1 * (lb[2] - lb[1])) / (lb[2] - lb[0])
    assert s["aubc"]["task"] == pytest.approx(want)
    assert s["aubc"]["direct"] == pytest.approx(want / 2)


def test_alpha_regret_against_the_per_setting_oracle():
    rows = []
    for n, vals in (("1", {"rule": 0.5, "0.5": 0.6, "1.0": 0.4}),
                    ("all", {"rule": 0.7, "0.5": 0.6, "1.0": 0.7})):
        for a, v in vals.items():
            rows.append({"protocol": "alpha", "setting": {"n": n, "alpha": a},
                         "tasks": {"t": {"ndcg@10": v}}})
    reg = alpha_regret(rows)
    assert reg["settings"] == 2
    assert reg["regret"]["rule"] == pytest.approx(0.05)
    assert reg["regret"]["0.5"] == pytest.approx(0.05)
    assert reg["regret"]["1.0"] == pytest.approx(0.1)
    assert reg["by_n"]["1"]["1.0"] == pytest.approx(0.2)


def _report_input(n_resamples: int = 100) -> dict:
    s = summarise(_results(), _pq(RAW), n_resamples=n_resamples)
    return {"format": "tttembed-eval/1",
            "config": {"protocols": ["fixed"], "analyses": [], "objective": "kd",
                       "few_queries": 50, "tasks": ["a", "b"]},
            "versions": {"tttembed": "x"}, "embedder_identity": "fake",
            "tasks": [{"name": "a", "queries": 3, "few_queries": True},
                      {"name": "b", "queries": 1, "few_queries": True}],
            "raw": {}, "sections": [{"scorer": "bm25", "scorer_identity": "bm25", "notes": ["n1"],
                                     **s}],
            "counts": {"scorer_paid": 0, "cells_cached": 12}, "timings_s": {"total": 1.0}}


def test_write_report_files(tmp_path):
    result = _report_input()
    written = {p.name for p in write_report(result, tmp_path / "rep")}
    assert {"results.json", "per_query.json", "report.md", "gain_0-bm25.png",
            "tasks_0-bm25.png"} <= written
    data = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert "per_query" not in data["sections"][0]["rows"][1]
    assert data["sections"][0]["aubc"]["task"] > 0
    pq = json.loads((tmp_path / "rep" / "per_query.json").read_text())
    assert pq["bm25"][1]["per_query"]["ndcg@10"]["a/1"] == pytest.approx(0.225)
    assert (tmp_path / "rep" / "gain_0-bm25.png").read_bytes()[:4] == b"\x89PNG"
    md = markdown(result)
    assert "### Fixed population" in md and "| task | 10 | 40 |" in md and "AUBC" in md
    assert "note: n1" in md


def test_scorer_comparison_side_by_side():
    from tttembed.evaluation.render import scorer_comparison

    def sec(name, gain):
        return {"scorer": name, "rows": [
            {"protocol": "heldout", "method": "raw", "B": 0, "setting": {}, "delta": {"ndcg@10": 0.0}},
            {"protocol": "heldout", "method": "task", "B": 8, "setting": {"d": 10},
             "delta": {"ndcg@10": gain}},
            {"protocol": "fixed", "method": "task", "B": 4, "setting": {}, "delta": {"ndcg@10": 0.1}}]}
    assert scorer_comparison({"sections": [sec("a", 0.01)]}) is None
    head, rows = scorer_comparison({"sections": [sec("a", 0.01), sec("b", -0.02)]})
    assert head[-2:] == ["a", "b"]
    assert ["heldout", "task", "8", '{"d": 10}', "+1.00", "-2.00"] in rows
    assert len(rows) == 2


def test_report_md_counts_and_timings_are_tables_and_s_b_is_defined():
    md = markdown(_report_input())
    assert "| counter | value |" in md and "| cells_cached | 12 |" in md
    assert "| scorer_paid | 0 |" in md
    assert "| stage | seconds |" in md and "| total | 1.000 |" in md
    assert "counts: {" not in md and "{\"total\"" not in md
    definition = md.index("S_B is the set of B rewarded pairs")
    assert definition < md.index("learn from S_B")       # defined before its first use
    assert "b = B / N" in md


def test_tasks_figure_has_one_bar_group_per_task():
    pytest.importorskip("matplotlib")
    from tttembed.evaluation.render import tasks_figure
    from tttembed.reporting import pyplot

    section = _report_input()["sections"][0]
    fig = tasks_figure(section)
    try:
        ax = fig.axes[0]
        labels = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
        assert labels == ["a", "b"]                        # one group per task
        bars = ax.patches
        assert len(bars) == 2 * 2                          # 2 tasks x 2 methods (direct, task)
        centres = sorted(round(b.get_x() + b.get_width() / 2, 6) for b in bars)
        assert centres[1] < 0.5 < centres[2]               # each task's bars around its tick
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["direct", "task"]
        assert ax.get_xlabel() and ax.get_ylabel()
    finally:
        pyplot().close(fig)


def test_gain_figure_draws_each_interval_and_offsets_the_lines():
    pytest.importorskip("matplotlib")
    from tttembed.evaluation.render import gain_figure
    from tttembed.reporting import pyplot

    section = _report_input(n_resamples=200)["sections"][0]
    fig = gain_figure(section)
    try:
        ax = fig.axes[0]
        bars = [c for c in ax.containers if getattr(c, "has_yerr", False)]
        assert len(bars) == 2                              # direct and task, each with its CI
        xs = [c.lines[0].get_xdata() for c in bars]
        assert all(a != b for a, b in zip(*xs))            # same budgets, dodged apart
        assert {c.lines[0].get_marker() for c in bars} == {"o", "s"}
        task = next(r for r in section["rows"] if r["method"] == "task" and r["B"] == 4)
        segments = bars[1].lines[2][0].get_segments()
        lows = sorted(seg[0][1] for seg in segments)
        assert any(lo == pytest.approx(100 * task["vs_raw"]["ci_low"]) for lo in lows)
        assert "log" in ax.get_xlabel() and "×100" in ax.get_ylabel()
    finally:
        pyplot().close(fig)
