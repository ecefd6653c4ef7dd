"""The adapter's weight-decay sweep on SciFact's TRAIN split only (docs/method-notes.md):
the default ``tttembed.adapt.adapter.WEIGHT_DECAY`` was fixed by this run, never on
evaluation labels.

A BEIR folder is made in a temporary directory with SciFact's corpus and queries and its
*train* judgments as the evaluated split (no test label is read); for each weight decay
``tttembed eval FOLDER -p heldout --scope task,adapter`` runs in a child process with the
decay set (rewards from 80% of the train claims at depth 10, the other 20% evaluated).
The rule fixed before the sweep: the largest mean Δ nDCG@10 of ``adapter`` with both
judges.

    python benchmarks/sweep_adapter_decay.py ../shared/data/scifact
    python benchmarks/sweep_adapter_decay.py ../shared/data/scifact --decays 0.3,0.01
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

JUDGES = ("qrels", "noisy-qrels:?sigma=0.2")
DECAYS = (0.3, 0.1, 0.03, 0.01, 0.003, 0.0003)


def train_folder(data: Path, into: Path) -> Path:
    """``into`` with ``data``'s corpus and queries linked and its train judgments as
    ``qrels/test.tsv``."""
    (into / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        target = into / name
        if not target.exists():
            target.symlink_to((data / name).resolve())
    (into / "qrels" / "test.tsv").write_bytes((data / "qrels" / "train.tsv").read_bytes())
    return into


def child(decay: float, judge: str, folder: Path, out: Path) -> None:
    """Run in the child: the eval with ``learn_adapters``' weight decay set to ``decay``."""
    import tttembed.adapt.adapter as ad

    assert ad.learn_adapters.__kwdefaults__ is not None
    ad.learn_adapters.__kwdefaults__["weight_decay"] = decay
    from tttembed.cli import main

    sys.argv = ["tttembed", "eval", str(folder), "-s", judge, "-p", "heldout",
                "--scope", "task,adapter", "--baselines", "", "--alpha", "rule",
                "--no-plots", "--no-cell-cache", "--resamples", "1000", "--quiet",
                "-o", str(out)]
    main()


def delta(out: Path, method: str) -> tuple[float, float, float]:
    """Δ nDCG@10 x100 of ``method`` on the held-out claims and its 95% interval."""
    got = json.loads((out / "results.json").read_text())
    for section in got["sections"]:
        for r in section["rows"]:
            if r["method"] == method and r["protocol"] == "heldout":
                t = r["vs_raw"]
                return 100 * t["delta"], 100 * t["ci_low"], 100 * t["ci_high"]
    raise SystemExit(f"{out}: no held-out row for {method}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="SciFact's BEIR folder (with qrels/train.tsv)")
    ap.add_argument("--decays", default=",".join(str(d) for d in DECAYS),
                    help="weight decays to try, comma-separated")
    ap.add_argument("--child", nargs=3, metavar=("DECAY", "JUDGE", "OUT"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not (args.data / "qrels" / "train.tsv").exists():
        print(f"skipped: {args.data} has no qrels/train.tsv")
        return 0
    with tempfile.TemporaryDirectory(prefix="adapter-decay-") as tmp:
        folder = train_folder(args.data, Path(tmp) / "scifact-train")
        if args.child:
            child(float(args.child[0]), args.child[1], folder, Path(args.child[2]))
            return 0
        decays = [float(d) for d in args.decays.split(",") if d]
        task = float("nan")
        print("weight decay | " + " | ".join(f"adapter, {j}" for j in JUDGES) +
              " | task, " + JUDGES[0])
        for decay in decays:
            cells = []
            for judge in JUDGES:
                out = Path(tmp) / f"out-{JUDGES.index(judge)}-{decay}"
                subprocess.run([sys.executable, __file__, str(args.data), "--child",
                                str(decay), judge, str(out)], check=True,
                               stdout=subprocess.DEVNULL, env={**os.environ, "TTTEMBED_THREADS":
                                    os.environ.get("TTTEMBED_THREADS", "1")})
                d, lo, hi = delta(out, "adapter")
                cells.append(f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]")
                if judge == JUDGES[0]:
                    task = delta(out, "task")[0]
            print(f"{decay:g} | " + " | ".join(cells) + f" | {task:+.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
