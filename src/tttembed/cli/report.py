"""Terminal tables of metrics (rich)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from tttembed.cli._common import console


def print_metrics(runs: Mapping[str, tuple[Mapping, Mapping]], title: str = "",
                  metrics: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")) -> dict:
    """One row per task: metric means over the task's judged queries."""
    from tttembed.evaluate.metrics import evaluate

    table = Table(title=title or None)
    table.add_column("task")
    table.add_column("queries", justify="right")
    for m in metrics:
        table.add_column(m, justify="right")
    out = {}
    for name, (qrels, run) in runs.items():
        scores = evaluate(qrels, run, metrics=metrics)
        out[name] = scores
        judged = sum(1 for g in qrels.values() if any(v >= 1 for v in g.values()))
        table.add_row(name, str(judged), *(f"{scores[m]:.4f}" for m in metrics))
    console.print(table)
    return out
