"""Goals and measured values of the benchmarks, in one format (read by ``run_all.py``).

Each benchmark script declares its goals once, as a ``GOALS`` dict of :class:`Goal`, and
ends with ``claims.emit(GOALS, measured)``: the claims are printed, and appended as JSON
lines to the file named by ``$TTTEMBED_CLAIMS`` when ``run_all.py`` runs the script;
``claims.check`` prints them as a goal table and says which missed (for a script whose
exit status is its verdict).
``ratio`` is measured / target: <= 1 passes a "<=" goal, >= 1 a ">=" goal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV = "TTTEMBED_CLAIMS"


@dataclass(frozen=True)
class Goal:
    claim: str
    op: str          # "<=", ">=", "==" or "info" (reported, never a MISS)
    target: float | None
    unit: str = ""

    @property
    def text(self) -> str:
        return "-" if self.op == "info" else f"{self.op} {self.target:g}{self.unit}"

    def verdict(self, value: float | None) -> tuple[float | None, str]:
        """``(ratio, "PASS" | "MISS" | "info" | "n/a")`` of a measured value."""
        if value is None:
            return None, "n/a"
        if self.op == "info" or self.target is None:
            return None, "info"
        ratio = value / self.target if self.target else None
        ok = {"<=": value <= self.target, ">=": value >= self.target,
              "==": value == self.target}[self.op]
        return ratio, "PASS" if ok else "MISS"


def rows(goals: Mapping[str, Goal], measured: Mapping[str, float | None],
         note: str = "") -> list[dict]:
    """One claim row per measured value (keys of ``goals``): claim, goal, measured, unit,
    ratio, verdict."""
    out = []
    for key, value in measured.items():
        goal = goals[key]
        ratio, verdict = goal.verdict(value)
        out.append({"claim": goal.claim + (f" ({note})" if note else ""), "goal": goal.text,
                    "measured": None if value is None else float(value), "unit": goal.unit,
                    "ratio": ratio, "verdict": verdict})
    return out


def emit(goals: Mapping[str, Goal], measured: Mapping[str, float | None],
         note: str = "") -> list[dict]:
    """Print the claims of ``measured`` (keys of ``goals``) and append them to $TTTEMBED_CLAIMS."""
    claims = rows(goals, measured, note)
    for r in claims:
        print(f"claim: {r['claim']}: {fmt(r['measured'])}{r['unit']} "
              f"(goal {r['goal']}) {r['verdict']}")
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for r in claims:
                fh.write(json.dumps(r) + "\n")
    return claims


def check(goals: Mapping[str, Goal], measured: Mapping[str, float | None]) -> list[bool]:
    """Print a goal / target / measured / verdict table of ``measured``; one bool per row,
    False for a MISS (an ``info`` or unmeasured row passes)."""
    print(f"\n{'goal':<76} {'target':>9} {'measured':>9}  verdict")
    claims = rows(goals, measured)
    for r in claims:
        print(f"{r['claim']:<76} {r['goal']:>9} {fmt(r['measured']):>9}  {r['verdict']}")
    return [r["verdict"] != "MISS" for r in claims]


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or 0.01 <= abs(x) < 1e5:
        return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    return f"{x:.2e}"
