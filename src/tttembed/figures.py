"""Writing matplotlib figures, shared by the evaluation and chain reports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def save_figure(plt: Any, fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Lay out, write (creating the folder) and close a matplotlib figure."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
