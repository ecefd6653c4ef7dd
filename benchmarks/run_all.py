"""Run the listed benchmarks and print one table: claim, goal, measured, ratio, PASS/MISS.

    python benchmarks/run_all.py [--quick] [--check] [--only NAME,...] [--markdown FILE]

Each benchmark script states its goals once (its ``GOALS``) and reports its measured
values through ``claims.emit``; this script runs the ones listed in :data:`RUNS` (a script
not listed there is not run) one after another (so they do not compete for the cores),
collects the claims through ``$TTTEMBED_CLAIMS`` and adds the import time of
``tttembed --help`` and of each command's ``--help``. ``--quick`` runs
every benchmark at a reduced size (its claims say at which size; the optimizer's time is
scaled to the goal's size). ``--check`` exits 1 when a claim MISSes its goal or a
benchmark fails. ``--markdown FILE`` also writes the table as Markdown (docs/performance.md
is pasted from it). Timings on a shared machine are noisy: the
ratios inside one benchmark are measured in one run. Not run in CI (there
``tests/test_benchmarks.py`` runs every script once at a tiny size).

The study's warm rerun runs ``study.py`` twice on one cache (``--study-cache``, default
``<tttembed cache>/bench-study``): the first run fills it (cold the first time, hours
for all six tasks on 2 cores), the second is the timed warm rerun. The other studies
(``guard_study.py``, ``reward_sweep.py``, ``chain_tables.py``: hours cold, or tables of
their reports) run on their own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import DATA
from claims import Goal, fmt

HERE = Path(__file__).resolve().parent
#: script, full-size arguments, --quick arguments
RUNS: list[tuple[str, list[str], list[str]]] = [
    ("bench_optimizer.py", ["--vs-reference"],
     ["--n", "2000", "--steps", "60", "--loop-sample", "10", "--vs-reference"]),
    ("bench_optimizer.py", ["--k", "100", "--scopes", "query", "--loop-sample", "5"],
     ["--k", "100", "--n", "300", "--steps", "30", "--scopes", "query", "--loop-sample", "3"]),
    ("bench_adapted_search.py", [], ["--repeats", "3", "--copies", "3"]),
    ("bench_identical_ids.py", [], ["--repeats", "3"]),
    ("bench_query_alpha.py", [], ["--queries", "100", "--repeats", "1"]),
    ("bench_embed_index_search.py", [], ["--docs", "300", "--repeats", "2"]),
    ("bench_ledger.py", [], ["--n", "2000", "--b1", "100", "--b2", "300"]),
    ("bench_status_cost.py", [], ["--steps", "10000,50000", "--repeats", "1"]),
    ("bench_chain.py", [], ["--questions", "20", "--skip-train", "--repeats", "1"]),
    ("bench_serve.py", [], ["--requests", "1500", "--clients", "1,8,32", "--reload-requests",
                            "1000", "--reloads", "5", "--search-requests", "600"]),
    ("bench_threads.py", [], []),
    ("bench_loop_gain.py", [str(DATA / "scifact")],
     [str(DATA / "cranfield"), "--windows", "3", "--head", "30", "--tail", "10"]),
    ("bench_loop_states.py", [str(DATA / "scifact"), "--many-states", "10000"],
     [str(DATA / "cranfield"), "--many-states", "2000"]),
    ("bench_loop_audit_spend.py", [], ["--modules", "json,csv"]),
    ("bench_loop.py", ["--history", "10000,100000,1000000"],
     ["--history", "10000,100000", "--steps", "10"]),
    ("bench_allocation.py", ["--data-root", str(DATA)],
     ["--data-root", str(DATA), "--budgets", "1,10"]),
    ("bench_scale.py", [], ["--abstracts", "300"]),
    ("bench_scale_index.py", [], ["--n", "100000", "--backends", "flat,ivfpq,hnsw",
                                  "--learn-queries", "1000", "--train-queries", "100"]),
]
STUDY_QUICK = ["--tasks", "medline", "--skip-analyses"]
CLI_GOAL = Goal("CLI: `tttembed{cmd} --help` wall time (import cost)", "info", None, " s")


def run_script(script: str, extra: list[str], claims_file: Path, timeout: float
               ) -> tuple[int, float]:
    env = {**os.environ, "TTTEMBED_CLAIMS": str(claims_file)}
    t0 = time.perf_counter()
    try:
        rc = subprocess.run([sys.executable, str(HERE / script), *extra], env=env,
                            cwd=HERE.parent, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    return rc, time.perf_counter() - t0


def cli_times(repeats: int = 3) -> list[dict]:
    """Best-of wall time of ``tttembed --help`` and of each command's ``--help``."""
    exe = Path(sys.executable).with_name("tttembed")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "tttembed.cli"]
    out = subprocess.run([*base, "--help"], capture_output=True, text=True).stdout
    commands = _commands(out)
    rows = []
    runs = [("Python startup alone (`python -c pass`), for reference",
             [sys.executable, "-c", "pass"])]
    runs += [(CLI_GOAL.claim.format(cmd=f" {c}" if c else ""), [*base, *c.split(), "--help"])
             for c in ["", *commands]]
    for claim, argv in runs:
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True)
            ts.append(time.perf_counter() - t0)
        rows.append({"claim": claim, "goal": "-", "measured": min(ts), "unit": " s",
                     "ratio": None, "verdict": "info"})
    return rows


def _commands(help_text: str) -> list[str]:
    """Command names from the top-level help: argparse's ``{a,b}`` line or the rows of
    a rich "Commands" box (``│ name   description``)."""
    names: list[str] = []
    in_box = False
    for line in help_text.splitlines():
        text = line.strip()
        if text.startswith("{") and "}" in text:
            return [c for c in text[1:text.index("}")].split(",") if c]
        if "Commands" in text:
            in_box = True
        elif in_box and text.startswith("│ ") and text[2:3].isalpha():
            names.append(text[2:].split()[0])
        elif in_box and text.startswith("╰"):
            in_box = False
    return names


def table(rows: list[dict], markdown: bool = False) -> str:
    head = ["claim", "goal", "measured", "ratio", "result"]
    body = [[r["claim"], r["goal"], fmt(r["measured"]) + (r["unit"] if r["measured"] is not None
                                                         else ""),
             "-" if r["ratio"] is None else f"{r['ratio']:.2f}", r["verdict"]] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths))
                     for line in [head, *body])


def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(script, arguments) in run order: :data:`RUNS`, then the study twice (fill the
    cache, then the warm rerun)."""
    runs = [(s, quick if args.quick else full) for s, full, quick in RUNS]
    study = ["--data-root", str(args.data_root), "--cache-dir", str(args.study_cache),
             *(STUDY_QUICK if args.quick and not args.study_tasks else [])]
    if args.study_tasks:
        study += ["--tasks", args.study_tasks]
    runs += [("study.py", study + ["--out", str(args.tmp / "fill")]),
             ("study.py", study + ["--out", str(args.tmp / "warm")])]
    if args.only:
        runs = [r for r in runs if r[0].removesuffix(".py") in args.only.split(",")]
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every benchmark at a reduced size")
    ap.add_argument("--check", action="store_true", help="exit 1 on a MISS or a failure")
    ap.add_argument("--only", default="", help="comma-separated script names (no .py)")
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--data-root", type=Path, default=DATA)
    ap.add_argument("--study-cache", type=Path, default=None)
    ap.add_argument("--study-tasks", default="",
                    help="the study on these tasks only (comma-separated; default all six)")
    ap.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per script")
    args = ap.parse_args()
    if args.study_cache is None:
        from tttembed.core.paths import cache_dir

        args.study_cache = cache_dir() / "bench-study"
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = Path(tmp)
        claims_file = args.tmp / "claims.jsonl"
        claims_file.touch()
        for script, extra in plan(args):
            print(f"== {script} {' '.join(extra)}", flush=True)
            fill = script == "study.py" and extra[-1] == str(args.tmp / "fill")
            # the fill run only prepares the cache: its claims are not the timed rerun's
            rc, secs = run_script(script, extra, args.tmp / "fill-claims.jsonl" if fill
                                  else claims_file, args.timeout)
            print(f"== {script}: exit {rc}, {secs:.0f} s", flush=True)
            if rc:
                failed.append(script)
        rows = [json.loads(line) for line in claims_file.read_text().splitlines() if line]
    if not args.only or "cli" in args.only.split(","):
        rows += cli_times()
    print()
    print(table(rows))
    if args.markdown:
        args.markdown.write_text(table(rows, markdown=True) + "\n")
    misses = [r["claim"] for r in rows if r["verdict"] == "MISS"]
    print(f"\n{len(rows)} claims: {sum(r['verdict'] == 'PASS' for r in rows)} PASS, "
          f"{len(misses)} MISS; failed scripts: {', '.join(failed) or 'none'}")
    return 1 if args.check and (misses or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
