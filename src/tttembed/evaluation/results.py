"""What ``tttembed.api.evaluate`` returns: the JSON-ready result, its tables and files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tttembed.types import PathLike


@dataclass(frozen=True)
class EvalReport:
    """What ``evaluate`` returns: ``data`` is the JSON-ready result (results.json)."""

    data: dict[str, Any] = field(repr=False)

    def write(self, out: PathLike, *, plots: bool = True, overwrite: bool = False) -> list[Path]:
        """results.json, per_query.json, report.md and PNG plots, written whole or not at all.

            >>> report.write("reports/run1")
        """
        from tttembed.core.io import refuse_existing
        from tttembed.evaluation.report import write_report

        refuse_existing(out, overwrite, "report folder")
        return write_report(self.data, Path(out), plots=plots)

    def tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """(title, header, rows) of every protocol's table, metrics 0-1 with 4 decimals."""
        from tttembed.evaluation.render import CONSOLE_SCALE, TITLES, protocol_table

        out = []
        for s in self.data["sections"]:
            for proto, title in TITLES.items():
                head, rows = protocol_table(s, proto, CONSOLE_SCALE)
                if rows:
                    out.append((f"{title} — scorer {s['scorer']}", head, rows))
        return out
