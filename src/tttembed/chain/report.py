"""Report writing: results.json (with config and versions), Markdown tables, PNG plots.

Generic on purpose (nothing chain-specific), so that it can move to a shared
``tttembed.evaluate.report`` module later.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
import uuid
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from tttembed.errors import MissingDependency
from tttembed.figures import save_figure

VERSIONED = ("tttembed", "numpy", "torch", "faiss-cpu", "sentence-transformers",
             "transformers", "peft")


def versions(packages: Sequence[str] = VERSIONED) -> dict[str, str]:
    """Installed versions of the given distributions (absent ones are skipped)."""
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tuples lists, numpy scalars Python numbers."""
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomic JSON write (temporary file + rename), sorted keys, NaN as null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(_clean(obj), indent=2, sort_keys=True, ensure_ascii=False)
                   + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_results(path: str | os.PathLike[str], config: Mapping[str, Any],
                  results: Mapping[str, Any]) -> Path:
    """results.json: {"config", "versions", "created", "results"}."""
    return write_json(path, {"config": dict(config), "versions": versions(),
                             "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "results": dict(results)})


def fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   digits: int = 2) -> str:
    """A GitHub Markdown table; numbers right-aligned, floats with ``digits`` decimals."""
    def cell(v: Any) -> str:
        return fmt(v, digits).replace("|", "\\|")

    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and bool(rows)
               for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency("matplotlib", "report") from exc
    return plt


def bar_plot(path: str | os.PathLike[str], groups: Sequence[str],
             series: Mapping[str, Sequence[float]], *, title: str = "", ylabel: str = ""
             ) -> Path:
    """Grouped bars: one group per label in ``groups``, one bar per series."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(groups) * max(len(series), 1) / 2), 3.2))
    width = 0.8 / max(len(series), 1)
    for j, (name, values) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, [float("nan") if v is None else v for v in values], width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=7)
    return save_figure(plt, fig, path)


def line_plot(path: str | os.PathLike[str], x: Sequence[float],
              series: Mapping[str, Sequence[float]], *, title: str = "", xlabel: str = "",
              ylabel: str = "") -> Path:
    """One line per series over shared x values."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for name, values in series.items():
        ax.plot(list(x), [float("nan") if v is None else v for v in values], marker="o",
                label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if series:
        ax.legend(fontsize=7)
    return save_figure(plt, fig, path)


__all__ = ["bar_plot", "fmt", "line_plot", "markdown_table", "versions", "write_json",
           "write_results"]
