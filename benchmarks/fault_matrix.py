"""The fault matrix: run the whole fault-injection suite (``tests/faults``) and print one
row per case: case, expected behaviour (the test's docstring), observed, OK/FAIL.

    python benchmarks/fault_matrix.py [-k EXPR] [--xml results.xml]

(``tools/fault_matrix.py`` is the same entry under its older path.)

Every test of ``tests/faults`` is a case (a parametrised test gives one case per
parameter set). Observed is what pytest saw: "as expected" for a pass, the first line of
the assertion or error otherwise. Skipped cases (a check the machine cannot do, such as
mounting a tmpfs without root) are listed with their reason and are not counted as OK.
The last line is ``N cases: X OK, Y FAIL``; the exit status is 1 when any case failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_suite(xml: Path, select: str | None) -> int:
    """pytest on tests/faults writing junit XML to ``xml``; its exit status."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
           "tests/faults", f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    if select:
        cmd += ["-k", select]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode


def _first_line(text: str | None, limit: int = 110) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def cases(xml: Path) -> list[tuple[str, str, str, str]]:
    """(case, expected, observed, status) per test case in the junit XML."""
    rows = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        module = tc.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}::{tc.get('name')}"
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        expected = props.get("expected") or name
        failure = tc.find("failure")
        if failure is None:
            failure = tc.find("error")
        skipped = tc.find("skipped")
        if failure is not None:
            observed = _first_line(failure.get("message")) or _first_line(failure.text)
            rows.append((name, expected, observed, "FAIL"))
        elif skipped is not None:
            rows.append((name, expected, _first_line(skipped.get("message")), "SKIP"))
        else:
            rows.append((name, expected, "as expected", "OK"))
    return rows


def print_matrix(rows: list[tuple[str, str, str, str]]) -> tuple[int, int]:
    """Print the rows; (OK, FAIL) counts."""
    for i, (name, expected, observed, status) in enumerate(rows, 1):
        print(f"{i:3d}. [{status}] {name}")
        print(textwrap.fill(f"expected: {expected}", 100, initial_indent="       ",
                            subsequent_indent="         "))
        print(textwrap.fill(f"observed: {observed}", 100, initial_indent="       ",
                            subsequent_indent="         "))
    ok = sum(r[3] == "OK" for r in rows)
    fail = sum(r[3] == "FAIL" for r in rows)
    skipped = len(rows) - ok - fail
    if skipped:
        print(f"{skipped} case(s) skipped on this machine (reasons above), not counted")
    print(f"{ok + fail} cases: {ok} OK, {fail} FAIL")
    return ok, fail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="select", help="pytest -k expression (a subset of cases)")
    ap.add_argument("--xml", type=Path, help="keep the junit XML here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        xml = args.xml or Path(tmp) / "faults.xml"
        status = run_suite(xml, args.select)
        if not xml.exists():
            print(f"pytest did not run (exit status {status})", file=sys.stderr)
            return 2
        ok, fail = print_matrix(cases(xml))
    return 1 if fail or status not in (0, 5) else 0


if __name__ == "__main__":
    sys.exit(main())
