"""Writing reports: results.json, Markdown tables, PNG plots (files through core.io).

Shared by the evaluation harness (``tttembed.evaluation.report``) and the chain evaluation
(``tttembed.chain.api``); nothing here knows about either. Light at import time:
matplotlib is imported by the plotting functions only.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tttembed.core.errors import MissingDependency
from tttembed.core.io import DISTRIBUTIONS, atomic_file, clean, now_utc, versions, write_json
from tttembed.types import PathLike


def write_results(path: PathLike, config: Mapping[str, Any],
                  results: Mapping[str, Any], *,
                  distributions: Sequence[str] = DISTRIBUTIONS) -> Path:
    """results.json: ``{"config", "versions", "created", "results"}``."""
    return write_json(path, {"config": dict(config), "versions": versions(distributions),
                             "created": now_utc(),
                             "results": dict(results)})


# --- Markdown ---------------------------------------------------------------------------

def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: None and NaN as an en dash, floats with ``digits`` decimals."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy scalar
        value = value.item()
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _cell(value: Any, digits: int = 2) -> str:
    return " ".join(fmt(value, digits).split("\n")).replace("|", "\\|")


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]],
                   digits: int = 2) -> str:
    """A GitHub Markdown table ending in a newline. Columns holding only numbers (or None)
    are right-aligned; floats get ``digits`` decimals; ``|`` in a cell is escaped."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"a table row has {len(row)} cells for {len(headers)} headers")
    numeric = [bool(rows) and all(_number(r[i]) or r[i] is None for r in rows)
               for i in range(len(headers))]
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(_cell(v, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- plots ------------------------------------------------------------------------------

def pyplot() -> Any:
    """``matplotlib.pyplot``, on the Agg backend unless pyplot was already imported (a
    notebook keeps its backend)."""
    try:
        import matplotlib

        if "matplotlib.pyplot" not in sys.modules:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependency("matplotlib", "report") from exc
    return plt


def save_figure(plt: Any, fig: Any, path: PathLike, dpi: int = 120) -> Path:
    """Lay out, write atomically (creating the folder) and close a matplotlib figure; the
    format follows the file's suffix (PNG when it has none)."""
    path = Path(path)
    try:
        fig.tight_layout()
        with atomic_file(path, "wb") as fh:
            fig.savefig(fh, dpi=dpi, format=path.suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
    return path


__all__ = ["DISTRIBUTIONS", "clean", "fmt", "markdown_table", "pyplot", "save_figure", "versions", "write_json", "write_results"]
