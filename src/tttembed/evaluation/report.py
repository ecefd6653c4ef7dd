"""From per-query metrics to numbers people read: summaries, and the report folder
(results.json, per_query.json; report.md and PNGs rendered by :mod:`.render`).

``summarise`` turns protocol records into rows: per-task means, the equal-task average
(nDCG@10, Recall@100), Delta vs raw, a paired test against raw and against direct
reranking (sign-flip randomisation p-value and bootstrap 95% CI), AUBC per method of the
fixed-population curve, the alpha-ablation regret and the leave-one-task-out mean.

Paired tests over queries of several tasks weight each query by ``N / (T n_t)`` so that the
tested mean difference is exactly the equal-task Delta (``n_t`` the task's queries).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.io import atomic_directory, write_json, write_text
from tttembed.evaluation.config import ALPHA_CHOSEN, CELL_METRICS, CHOICE, VALIDATION
from tttembed.evaluation.render import MAIN, make_plots, markdown
from tttembed.metrics.stats import ComparisonCache, aubc, compare, p_value


def by_task(values: Mapping[str, float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key, v in values.items():
        task, qid = key.split("/", 1)
        out.setdefault(task, {})[qid] = v
    return out


def macro(values: Mapping[str, float]) -> float:
    """Mean over tasks of each task's mean (tasks count equally)."""
    groups = by_task(values)
    if not groups:
        return float("nan")
    return float(np.mean([np.mean(list(v.values())) for v in groups.values()]))


def weighted_compare(a: Mapping[str, float], b: Mapping[str, float],
                     n_resamples: int = 10000, cache: ComparisonCache | None = None
                     ) -> dict[str, float] | None:
    """Paired test of the equal-task mean difference ``a - b`` over common queries."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    sizes: dict[str, int] = {}
    for k in common:
        t = k.split("/", 1)[0]
        sizes[t] = sizes.get(t, 0) + 1
    w = {k: len(common) / (len(sizes) * sizes[k.split("/", 1)[0]]) for k in common}
    c = compare({k: a[k] * w[k] for k in common}, {k: b[k] * w[k] for k in common},
                n_resamples=n_resamples, cache=cache)
    return {"delta": c.delta, "p_value": c.p_value, "ci_low": c.ci_low,
            "ci_high": c.ci_high, "n": c.n}


def _known(record: Any, raw: Mapping[str, Mapping[str, float]]) -> Any:
    """``record`` with its metric values restricted to the evaluated queries (the keys of
    ``raw``, ``task/qid``): a value of another key (an edited or older cache entry, a task
    no longer evaluated) cannot be paired with raw and is left out; other per-query
    entries (the alpha chosen, the validation counts) are kept."""
    from dataclasses import replace

    per_query = {m: ({k: v for k, v in values.items() if k in raw.get(m, {})}
                     if m in CELL_METRICS else values)
                 for m, values in record.per_query.items()}
    return replace(record, per_query=per_query)


def _setting_key(r: Any) -> tuple:
    s = {k: v for k, v in r.setting.items() if k != "objective"}
    return (r.protocol, r.b, json.dumps(s, sort_keys=True, default=str))


def summarise(results: Sequence[Any], raw: Mapping[str, Mapping[str, float]], *,
              n_resamples: int = 10000, few_queries: int = 50,
              cache: ComparisonCache | None = None) -> dict[str, Any]:
    """Rows (one per record) plus AUBC, alpha regret and the LOTO mean. ``cache`` keeps
    the paired tests' results (the same numbers, read back on a rerun)."""
    results = [_known(r, raw) for r in results]
    direct = {_setting_key(r): r for r in results if r.method == "direct"}
    rows = []
    for r in results:
        keys = list(r.per_query.get(MAIN, {}))
        base = {m: {k: raw[m][k] for k in keys if k in raw[m]} for m in CELL_METRICS}
        row: dict[str, Any] = {"protocol": r.protocol, "method": r.method, "b": r.b,
                               "B": r.budget, "setting": dict(r.setting),
                               "n_queries": len(keys)}
        row["macro"] = {m: macro(r.per_query.get(m, {})) for m in CELL_METRICS}
        row["delta"] = {m: row["macro"][m] - macro(base[m]) for m in CELL_METRICS}
        tasks: dict[str, Any] = {}
        raw_t = {m: by_task(base[m]) for m in CELL_METRICS}
        for m in CELL_METRICS:
            for t, vals in by_task(r.per_query.get(m, {})).items():
                entry = tasks.setdefault(t, {"n": len(vals), "few": len(vals) < few_queries})
                entry[m] = float(np.mean(list(vals.values())))
                entry[f"delta_{m}"] = entry[m] - float(np.mean(list(raw_t[m][t].values())))
        if r.method != "raw":
            row["vs_raw"] = weighted_compare(r.per_query[MAIN], base[MAIN], n_resamples, cache)
            for t, vals in by_task(r.per_query[MAIN]).items():
                tasks[t]["p_raw"] = p_value(vals, raw_t[MAIN][t], n_resamples=n_resamples,
                                            cache=cache)
            d = direct.get(_setting_key(r))
            if d is not None and r.method != "direct":
                row["vs_direct"] = weighted_compare(r.per_query[MAIN], d.per_query[MAIN],
                                                    n_resamples, cache)
        row["tasks"] = tasks
        if ALPHA_CHOSEN in r.per_query:  # the alpha `auto` chose ("0": the raw vector)
            row["alpha_chosen"] = next(iter(r.per_query[ALPHA_CHOSEN]))
        if VALIDATION in r.per_query:  # the guard's validation pairs (paid, cap, ran)
            row["validation"] = {k: v for k, v in r.per_query[VALIDATION].items()}
        if CHOICE in r.per_query:  # method auto: the choice per task
            row["chosen"] = dict(k.split("=", 1) for k in r.per_query[CHOICE] if "=" in k)
        row["per_query"] = {m: dict(r.per_query.get(m, {})) for m in CELL_METRICS}
        rows.append(row)
    return {"rows": rows, "aubc": _aubc(rows), "alpha_regret": alpha_regret(rows),
            "loto_mean_delta": _loto(rows), "harm": harm_counts(rows)}


def harm_counts(rows: Sequence[Mapping[str, Any]], protocol: str = "fixed",
                level: float = 0.05) -> dict[str, dict[str, int]]:
    """Per method: task x budget cells, and how many of them differ significantly from raw
    (paired test, ``p < level``) with a loss / with a gain."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["protocol"] != protocol or r["method"] == "raw" or r["B"] <= 0:
            continue
        c = out.setdefault(r["method"], {"cells": 0, "losses": 0, "gains": 0})
        if ALPHA_CHOSEN in r:  # one state per budget: did `auto` shrink it to raw?
            c["states"] = c.get("states", 0) + 1
            c["shrunk"] = c.get("shrunk", 0) + (r[ALPHA_CHOSEN] in ("0", "none"))
        if "validation" in r:  # the guard: how often it ran, and the pairs it paid
            v = r["validation"]
            c["validated"] = c.get("validated", 0) + 1
            c["guarded"] = c.get("guarded", 0) + int(v.get("guard", 0))
            c["validation_pairs"] = c.get("validation_pairs", 0) + int(v.get("paid", 0))
            c["learning_pairs"] = c.get("learning_pairs", 0) + int(r["B"])
        for e in r["tasks"].values():
            c["cells"] += 1
            if e.get("p_raw", 1.0) < level:
                c["losses" if e[f"delta_{MAIN}"] < 0 else "gains"] += 1
    return out


def _aubc(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["protocol"] == "fixed" and r["B"] > 0:
            curves.setdefault(r["method"], []).append((r["b"], r["delta"][MAIN]))
    out = {}
    for method, pts in curves.items():
        pts.sort()
        if len(pts) >= 2:
            out[method] = aubc([p[0] for p in pts], [p[1] for p in pts])
    return out


def alpha_regret(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per alpha choice: mean over settings (task, n) of (oracle nDCG@10 - its nDCG@10)."""
    table: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        if r["protocol"] != "alpha":
            continue
        for t, entry in r["tasks"].items():
            table.setdefault((t, str(r["setting"]["n"])), {})[str(r["setting"]["alpha"])] = \
                entry[MAIN]
    if not table:
        return {}
    choices = sorted({a for v in table.values() for a in v},
                     key=lambda a: (a != "rule", a == "auto", a))

    def oracle(v: Mapping[str, float]) -> float:  # over the fixed choices: auto is judged
        return max(x for a, x in v.items() if a != "auto")
    regret = {a: float(np.mean([oracle(v) - v[a] for v in table.values() if a in v]))
              for a in choices}
    by_n: dict[str, dict[str, float]] = {}
    for (_t, n), v in table.items():
        for a in choices:
            if a in v:
                by_n.setdefault(n, {}).setdefault(a, 0.0)
                by_n[n][a] += (oracle(v) - v[a]) / sum(1 for k in table if k[1] == n)
    return {"regret": regret, "by_n": by_n, "settings": len(table)}


def _loto(rows: Sequence[Mapping[str, Any]]) -> float | None:
    d = [r["delta"][MAIN] for r in rows if r["protocol"] == "loto" and r["method"] == "global"]
    return float(np.mean(d)) if d else None


# --- writing --------------------------------------------------------------------------

def _light(result: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(result)
    out["sections"] = [{**s, "rows": [{k: v for k, v in r.items() if k != "per_query"}
                                      for r in s["rows"]]} for s in result["sections"]]
    return out


def write_report(result: Mapping[str, Any], out: str | Path, plots: bool = True,
                 per_query: bool = True) -> list[Path]:
    """results.json (every number, config, versions, fingerprints), per_query.json (each
    query's metrics in every row; large for big studies), report.md and PNG plots.

    The folder is written whole or not at all (built beside ``out``, swapped in once); in
    the JSON files NaN is null and objects JSON cannot hold (paths) are strings."""
    out = Path(out)
    with atomic_directory(out) as tmp:
        written = [write_json(tmp / "results.json", _light(result), indent=1)]
        if per_query:
            pq = {s["scorer"]: [{"protocol": r["protocol"], "method": r["method"], "B": r["B"],
                                 "setting": r["setting"], "per_query": r["per_query"]}
                                for r in s["rows"]] for s in result["sections"]}
            written.append(write_json(tmp / "per_query.json", pq, indent=None))
        images = make_plots(result, tmp) if plots else []
        written += images
        written.append(write_text(tmp / "report.md",
                                  markdown(result, [i.name for i in images])))
    return [out / p.name for p in written]
