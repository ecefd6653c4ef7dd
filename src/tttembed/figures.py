"""Writing matplotlib figures: ``save_figure`` now lives in :mod:`tttembed.reporting`
(kept importable from here)."""

from __future__ import annotations

from tttembed.reporting import save_figure

__all__ = ["save_figure"]
