"""The fault matrix under its older path: ``benchmarks/fault_matrix.py`` is the entry.

    python tools/fault_matrix.py [-k EXPR] [--xml results.xml]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[0] = str(Path(__file__).resolve().parents[1] / "benchmarks" / "fault_matrix.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
