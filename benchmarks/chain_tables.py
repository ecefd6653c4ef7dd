"""Markdown tables from ``tttembed chain eval`` folders (what docs/results-chain.md shows).

    python benchmarks/chain_tables.py systems=reports/2wiki analyses=reports/2wiki \
        seeds=gold,on-policy:reports/2wiki,reports/2wiki_s1,reports/2wiki_s2

``systems=DIR``: C@k / recall@k overall and by hop count, with ms/question;
``analyses=DIR``: state mismatch, next-step success by wrong passages, deletion test;
``seeds=ENC1,ENC2:DIR1,DIR2,...``: mean and sample standard deviation over eval folders
of the named encoders' C@5 and C@10.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from tttembed.reporting import fmt, markdown_table


def load(folder: str) -> dict[str, Any]:
    return json.loads((Path(folder) / "results.json").read_text())["results"]


def systems(folder: str) -> str:
    r = load(folder)
    s, lat = r["systems"], r["latency_s_per_question"]
    hops = sorted({h for m in s.values() for h in m["by_hops"]}, key=int)
    rows = [[name, m["all"]["C@5"], m["all"]["C@10"], m["all"]["recall@5"],
             m["all"]["recall@10"], *[m["by_hops"][h]["C@5"] for h in hops],
             *[m["by_hops"][h]["C@10"] for h in hops], round(lat[name] * 1000, 1)]
            for name, m in s.items()]
    head = ["system", "C@5", "C@10", "R@5", "R@10", *[f"C@5 {h}-hop" for h in hops],
            *[f"C@10 {h}-hop" for h in hops], "ms/question"]
    return markdown_table(head, rows)


def analyses(folder: str) -> str:
    r = load(folder)
    mm = r["mismatch"]
    steps = sorted({x["step"] for v in mm.values() for x in v})
    out = ["State mismatch (% of states still missing gold that hold a wrong passage):", "",
           markdown_table(["encoder", *[f"step {s}" for s in steps]],
                          [[n, *[f"{x['share_wrong']} ({x['with_wrong']}/{x['states']})"
                                 for x in v]] for n, v in mm.items()])]
    rec = r["recovery"]
    out += [f"Next-step success (%) on the {rec['n_states']} fixed states reached by "
            f"`{rec['reference']}`:", "",
            markdown_table(["encoder", "0 wrong", "1 wrong", ">=2 wrong"],
                           [[n, *[f"{fmt(v[b]['rate'])} (n={v[b]['n']})" for b in ("0", "1", ">=2")]]
                            for n, v in rec["by_encoder"].items()])]
    d = {k: v for k, v in r["deletion"].items() if k != "reference"}
    out += ["Deletion counterfactual (next-step success %, states holding a wrong passage):",
            "", markdown_table(["encoder", "states", "as reached", "wrong deleted",
                                "cost (points)"],
                               [[k, v["n"], v["original"], v["deleted"], v["cost"]]
                                for k, v in d.items()])]
    return "\n".join(out)


def seeds(spec: str) -> str:
    names, folders = spec.split(":", 1)
    rows = []
    for name in names.split(","):
        vals = {k: [load(f)["systems"][f"chain ({name})"]["all"][k] for f in folders.split(",")]
                for k in ("C@5", "C@10")}
        rows.append([name, len(vals["C@5"]),
                     *[f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}"
                       if len(v) > 1 else f"{v[0]:.2f}" for v in vals.values()],
                     " / ".join(f"{a:.2f}" for a in vals["C@5"])])
    return markdown_table(["encoder", "seeds", "C@5 mean ± sd", "C@10 mean ± sd",
                           "C@5 per seed"], rows)


def main(argv: list[str]) -> int:
    kinds = {"systems": systems, "analyses": analyses, "seeds": seeds}
    for arg in argv:
        kind, _, value = arg.partition("=")
        if kind not in kinds:
            print(f"unknown table {kind!r}; use systems=DIR, analyses=DIR or "
                  "seeds=ENC1,ENC2:DIR1,DIR2", file=sys.stderr)
            return 2
        print(kinds[kind](value))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
