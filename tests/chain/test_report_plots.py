"""The chain report's plots: readable ticks and labels, without a trained model."""

from __future__ import annotations

import math

import pytest

from tttembed.chain import report

pytest.importorskip("matplotlib")

SYSTEMS = ["beam4 (gold)", "chain (gold)", "chain (on-policy-shared)",
           "chain (synthetic-resampled)", "chain (untrained)", "single-shot (untrained)"]
ENCODERS = ["gold", "on-policy-shared", "synthetic-resampled", "untrained"]


def _results(steps=(2, 3, 4)) -> dict:
    metrics = {"C@5": 60.0, "C@10": 70.0, "recall@5": 80.0, "recall@10": 90.0, "n": 10}
    return {
        "systems": {n: {"all": metrics, "by_hops": {"2": metrics}} for n in SYSTEMS},
        "latency_s_per_question": {n: 0.05 for n in SYSTEMS},
        "mismatch": {e: [{"step": s, "states": 10, "with_wrong": 5, "share_wrong": 50.0 + j}
                         for s in steps] for j, e in enumerate(ENCODERS)},
        "recovery": {"n_states": 20, "reference": "gold", "by_encoder": {
            e: {"0": {"rate": 70.0, "n": 12}, "1": {"rate": 40.0, "n": 8},
                ">=2": {"rate": None, "n": 0}} for e in ENCODERS}},
        "deletion": {"reference": "gold",
                     **{e: {"n": 8, "original": 40.0, "deleted": 50.0, "cost": 10.0}
                        for e in ENCODERS}},
    }


@pytest.fixture()
def figures(monkeypatch, tmp_path):
    """The figures write_plots saves, by file name (drawn, still open)."""
    seen = {}

    def keep(plt, fig, path, dpi=120):
        fig.canvas.draw()
        seen[path.name] = fig
        return path

    monkeypatch.setattr(report, "save_figure", keep)
    yield lambda results: (report.write_plots(tmp_path, results), seen)[1]
    from tttembed.reporting import pyplot

    for fig in seen.values():
        pyplot().close(fig)


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _labels_clear(fig) -> bool:
    """Level labels: no two boxes overlap; slanted ones: parallel lines of text further
    apart than a line's height."""
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    if labels[0].get_rotation() == 0:
        boxes = [t.get_window_extent() for t in labels]
        return not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    xs = [ax.transData.transform((x, 0))[0] for x in ax.get_xticks()]
    gap = min(b - a for a, b in zip(xs, xs[1:])) * math.sin(math.radians(labels[0].get_rotation()))
    return gap > 1.2 * labels[0].get_fontsize() * fig.dpi / 72


def test_every_chain_plot_labels_both_axes(figures):
    figs = figures(_results())
    assert sorted(figs) == ["completeness.png", "mismatch.png", "recovery.png"]
    for name, fig in figs.items():
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), name


def test_chain_plot_tick_labels_do_not_overlap(figures):
    for name, fig in figures(_results()).items():
        assert _labels_clear(fig), name


@pytest.mark.parametrize("steps", [(2, 3, 4), (2,)])
def test_mismatch_ticks_are_the_integer_steps(figures, steps):
    ax = figures(_results(steps))["mismatch.png"].axes[0]
    assert list(ax.get_xticks()) == list(steps)
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(s) for s in steps]


def test_recovery_buckets_name_their_states_and_empty_ones(figures):
    ax = figures(_results())["recovery.png"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "0 wrong (n=12)", "1 wrong (n=8)", "≥2 wrong (n=0)"]
    assert "no data" in [t.get_text() for t in ax.texts]
    assert "wrong passages" in ax.get_xlabel()


def test_report_md_explains_cost_and_prints_no_none():
    md = report.report_markdown({"data": "d", "split": "test", "n_questions": 10, "steps": 4},
                                _results())
    assert "None" not in md and "– (n=0)" in md and "70.00 (n=12)" in md
    assert "cost = wrong deleted - as reached" in md and "C@k:" in md
