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
    cv = summary.get("crossval") or {}
    pairs = summary.get("pairs") or {}
    for label, value in (
            ("file", summary["file"]), ("scope", summary["scope"]),
            ("tasks", ", ".join(summary["tasks"])),
            ("vectors", f"{len(summary['groups'])} of dim {summary['dim']}"),
            ("embedder", f"{summary['embedder'] or '?'} (identity {summary['identity']})"),
            ("scorer", f"{summary['scorer'] or '?'} (rewards: {summary['reward_mapping'] or '?'})"),
            ("budget", f"{summary['budget']:,} pairs; " + ", ".join(
                f"{k} {v:,}" for k, v in pairs.items())),
            ("objective", f"{summary['objective']} {summary['hyperparameters']}"),
            ("alpha", f"asked {summary['alpha_asked']}, used {summary['alpha_chosen']}"),
            ("guard", _guard(cv)),
            ("method", _method(summary.get("selection"))),
            ("corpus", summary["corpus_fingerprint"] or "(no fingerprint: refused by search)"),
            ("made", f"{summary['created']} by tttembed {summary['tttembed_version']}")):
        console.print(f"{label:>9}: {value}")
    _groups_table(summary["groups"])


def _method(sel: dict[str, Any] | None) -> str:
    if not sel:
        return "the --scope state (learn --method auto chooses one per task)"
    choices = ", ".join(f"{t}: {c}" for t, c in sel.get("choice", {}).items())
    return (f"auto, per task ({choices}); validation pairs "
            f"{sel.get('validation_pairs_paid', 0):,} of a cap of {sel.get('validation_cap', 0):,}")


def _guard(cv: dict[str, Any]) -> str:
    if not cv:
        return "none run (learn --alpha auto or --crossval records it)"
    gains = {str(g["alpha"]): g for g in cv.get("gains", [])}
    auto = str(cv.get("auto"))
    best = gains.get(auto)
    at = (f"; estimated gain at alpha {auto}: {best['gain']:+.4f} "
          f"[{best['ci'][0]:+.4f}, {best['ci'][1]:+.4f}]") if best else ""
    return (f"{cv.get('folds')}-fold reward cross-validation on {cv.get('queries')} queries, "
            f"raw {cv.get('metric')} {cv.get('raw', float('nan')):.4f}; auto picks {auto}{at}")


def _groups_table(groups: list[dict[str, Any]]) -> None:
    table = Table(title="groups")
    for name in ("group", "n", "alpha", "|v|"):
        table.add_column(name, justify="left" if name == "group" else "right")
    for g in groups[:SHOWN]:
        table.add_row(g["name"], str(g["n"]), f"{g['alpha']:.4f}", f"{g['norm']:.4f}")
    if len(groups) > SHOWN:
        table.add_row(f"... {len(groups) - SHOWN} more (--json lists all)", "", "", "")
    console.print(table)
    console.print("n = rewarded queries behind a vector; alpha = its weight (n/(n+1) by "
                  "rule); |v| = the vector's norm", style="dim")


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
