"""``tttembed state show FILE`` and ``tttembed index show DIR|SPEC``: what an artifact
holds, read from its manifest (and, for a state, its arrays), without a model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from tttembed.cli._common import console, emit_json, handle_errors
from tttembed.cli._options import JsonOpt

state_app = typer.Typer(help="Inspect learned states.", no_args_is_help=True,
                        add_completion=False, rich_markup_mode=None)
#: Groups listed one per row before the table is cut (``--json`` lists them all).
SHOWN = 20


def state_summary(state: Any) -> dict[str, Any]:
    """Everything a state holds but its vectors: the manifest plus per-group n, alpha and
    the norm of each vector."""
    norms = np.linalg.norm(state.vectors, axis=1)
    manifest = state.manifest()
    manifest.pop("rewarded", None)  # text digests: counted below, not listed
    return {**manifest, "file": state.source, "tasks": state.tasks,
            "rewarded_texts": len(state.rewarded),
            "groups": [{"name": name, "key": key, "n": int(n), "alpha": float(a),
                        "norm": float(v)}
                       for name, key, n, a, v in zip(state.names, state.keys, state.n_g,
                                                     state.alpha, norms)]}


@state_app.command("show")
@handle_errors
def state_show(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="State file (vectors.npz) or its folder.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """What a state holds: scope, tasks, vectors, n and alpha per group, provenance."""
    from tttembed.adapt.state import load_state

    summary = state_summary(load_state(file))
    if as_json:
        emit_json(summary)
        return
    for label, value in state_lines(summary):
        console.print(f"{label:>9}: {value}")
    groups_table(summary["groups"], summary)


def state_lines(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``label: value`` lines of ``state show``, each read from the manifest of the
    state's own kind (a ``--scope`` state, one chosen by ``--method auto``; its guard
    ran, fell back or was not asked for)."""
    pairs = summary.get("pairs") or {}
    sel = summary.get("selection")
    kinds = sorted({g["part"] for g in _parts(summary)})
    return [
        ("file", summary["file"]), ("scope", _scope(summary, sel)),
        ("tasks", ", ".join(summary["tasks"])),
        ("vectors", f"{len(summary['groups'])} of dim {summary['dim']}"),
        *state_part_lines(summary),
        ("embedder", f"{summary['embedder'] or '?'} (identity {summary['identity']})"),
        ("scorer", f"{summary['scorer'] or '?'} (rewards: {summary['reward_mapping'] or '?'})"),
        ("budget", f"{summary['budget']:,} pairs; " + ", ".join(
            f"{k} {v:,}" for k, v in pairs.items())),
        ("objective", _objective(summary, kinds)),
        ("alpha", _alpha(summary, sel)),
        ("guard", _guard(summary.get("crossval") or {}, summary, sel)),
        ("method", _method(sel)),
        ("corpus", summary["corpus_fingerprint"] or "(no fingerprint: refused by search)"),
        ("made", f"{summary['created']} by tttembed {summary['tttembed_version']}")]


def state_part_lines(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The lines for an adapter's maps and neighbour transfer's embeddings (none for a
    state without them)."""
    parts = summary.get("parts") or {}
    hp = summary.get("hyperparameters") or {}
    out = []
    if parts.get("adapters"):
        out.append(("adapter", f"{parts['adapters']} task map(s) U V^T of rank {parts['rank']} "
                    f"(weight decay {(hp.get('adapter') or {}).get('weight_decay', '?')})"))
    if parts.get("neighbours"):
        nb = hp.get("neighbour") or {}
        out.append(("neighbour", f"{parts['neighbours']} rewarded query embeddings lend their "
                    f"vectors to unseen queries (k {nb.get('k', '?')}, floor "
                    f"{nb.get('floor', '?')}, temperature {nb.get('temperature', '?')})"))
    return out


#: What each kind of part is, as the groups table names it.
KD_PARTS = ("global", "task", "query")
PART_NAMES = {"rw-rocchio": "reward-weighted Rocchio", "qdrant-rf": "Qdrant's formula"}


def _parts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each group with ``part``: the scope or method its vector belongs to (a mixed
    state's query-wise groups are KD ``query`` vectors, Rocchio or Qdrant's formula, per
    task as the selection records)."""
    sel = summary.get("selection") or {}
    out = []
    for g in summary["groups"]:
        key = str(g["key"])
        task, _, rest = key.partition("/")
        if key == "*":
            part = "global"
        elif not rest:
            part = "task"
        elif summary["scope"] == "mixed":
            part = str((sel.get("query") or {}).get(task, "query"))
        else:
            part = "query"
        out.append({**g, "part": part})
    return out


def _scope(summary: dict[str, Any], sel: dict[str, Any] | None) -> str:
    if summary["scope"] != "mixed" or not sel:
        return str(summary["scope"])
    return "mixed (learn --method auto: one part per task, as chosen below)"


def _objective(summary: dict[str, Any], kinds: list[str]) -> str:
    kd = [k for k in kinds if k in KD_PARTS]
    text = f"{summary['objective']} {summary['hyperparameters']}"
    if summary["scope"] != "mixed":
        return text
    if not kd:
        names = ", ".join(PART_NAMES.get(k, k) for k in kinds)
        return (f"none: no KD part was chosen ({names}: no training)" if kinds else
                "none: no part was chosen (raw query vectors)")
    return f"{text} (the {', '.join(kd)} part{'s' if len(kd) > 1 else ''})"


def _alpha(summary: dict[str, Any], sel: dict[str, Any] | None) -> str:
    if sel:
        return "per part, as in the groups table and its legend"
    asked, used = summary["alpha_asked"], summary["alpha_chosen"]
    if asked == "auto":
        return f"auto: the guard chose {used} (below)"
    return f"{asked}, as asked" + (" (n/(n+1))" if asked == "rule" else "")


def _method(sel: dict[str, Any] | None) -> str:
    if not sel:
        return "the --scope state (learn --method auto chooses one per task)"
    choices = ", ".join(f"{t}: {c}" for t, c in sel.get("choice", {}).items())
    return (f"auto, per task ({choices}); validation pairs "
            f"{sel.get('validation_pairs_paid', 0):,} of a cap of {sel.get('validation_cap', 0):,}")


def _guard(cv: dict[str, Any], summary: dict[str, Any], sel: dict[str, Any] | None) -> str:
    """The guard line: method auto's validation, the --alpha auto guard that ran or fell
    back, a reward cross-validation recorded as an estimate only, or none."""
    if sel:
        return (f"ran: method auto's judged validation (validation pairs "
                f"{sel.get('validation_pairs_paid', 0):,} of a cap of "
                f"{sel.get('validation_cap', 0):,}; its evidence: learn's table, or --json)")
    if not cv:
        return ("none run: alpha as asked (learn --alpha auto or --method auto validate "
                "with the judge)")
    auto = str(cv.get("auto"))
    best = {str(g["alpha"]): g for g in cv.get("gains", [])}.get(auto)
    at = (f"; estimated gain at alpha {auto}: {best['gain']:+.4f} "
          f"[{best['ci'][0]:+.4f}, {best['ci'][1]:+.4f}]") if best else ""
    raw = f"raw {cv.get('metric')} {cv.get('raw', float('nan')):.4f}"
    method = cv.get("method", "")
    if method == "judged-diff":
        return (f"ran: judged re-search of {cv.get('queries')} queries ({raw}; validation "
                f"pairs {cv.get('validation_pairs_paid', 0):,} of a cap of "
                f"{cv.get('validation_cap', 0):,}); picked alpha {auto}{at}")
    estimate = (f"{cv.get('folds')}-fold reward cross-validation on {cv.get('queries')} "
                f"queries, {raw}")
    if method:
        return (f"fell back ({cv.get('fallback') or 'the guard could not run'}): {estimate}; "
                f"picked alpha {auto}{at}")
    if summary["alpha_asked"] == "auto":
        return f"{estimate}; picked alpha {auto}{at}"
    return (f"none run (alpha {summary['alpha_asked']} as asked); recorded estimate only: "
            f"{estimate} would pick {auto}{at}")


def groups_table(groups: list[dict[str, Any]], summary: dict[str, Any],
                 title: str = "groups", shown: int = SHOWN) -> None:
    """One row per group (the first :data:`SHOWN`) and a legend naming only what the
    table holds: a ``part`` column for a mixed state, and what alpha is for each kind of
    part present, read from the values (the rule, 1, or as chosen)."""
    rows = _parts({**summary, "groups": groups})
    mixed = summary["scope"] == "mixed"
    table = Table(title=title)
    columns = ("group", *(("part",) if mixed else ()), "n", "alpha", "|v|")
    for name in columns:
        table.add_column(name, justify="left" if name in ("group", "part") else "right")
    for g in rows[:shown]:
        table.add_row(g["name"], *((g["part"],) if mixed else ()), str(g["n"]),
                      f"{g['alpha']:.4f}", f"{g['norm']:.4f}")
    if len(rows) > shown:
        table.add_row(f"... {len(rows) - shown} more (--json lists all)",
                      *([""] * (len(columns) - 1)))
    console.print(table)
    console.print(groups_legend(rows, mixed), style="dim")


def groups_legend(rows: list[dict[str, Any]], mixed: bool) -> str:
    """What the groups table's columns mean, for the parts it holds."""
    if not rows:
        return "no group: every task keeps its raw query vectors"
    by_part: dict[str, list[dict[str, Any]]] = {}
    for g in rows:
        by_part.setdefault(g["part"], []).append(g)
    alphas = []
    for part, gs in by_part.items():
        values = {round(float(g["alpha"]), 6) for g in gs}
        if all(abs(g["alpha"] - g["n"] / (g["n"] + 1)) < 1e-6 for g in gs):
            how = "n/(n+1), the rule"
        elif values == {1.0}:
            how = "1, the vector is the whole offset"
        elif len(values) == 1:
            how = f"{values.pop():g} for every vector, as chosen"
        else:
            how = "as chosen per vector"
        alphas.append(f"{PART_NAMES.get(part, part) if mixed else part}: {how}")
    part = "part = the scope or method of the vector; " if mixed else ""
    return (f"{part}n = rewarded queries behind a vector; alpha = its weight ("
            + "; ".join(alphas) + "); |v| = the vector's norm")


@handle_errors
def index_show(
    index: Annotated[str, typer.Argument(metavar="INDEX", help="Index folder, or milvus:URI/COLLECTION / qdrant:URL_OR_PATH/COLLECTION.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """What an index holds: documents, dimension, embedder, corpus, build, versions."""
    from tttembed.index.store import load_index

    handle = load_index(index)
    manifest = dict(handle.manifest)
    summary = {"index": str(handle.path), "documents": len(handle.doc_ids),
               "first_doc_ids": handle.doc_ids[:5], **manifest}
    if as_json:
        emit_json(summary)
        return
    for key, value in summary.items():
        console.print(f"{key:>22}: {value}")
