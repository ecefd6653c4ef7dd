"""``tttembed chain search | train | eval``: the multi-hop chain retriever.

Argument parsing and printing only; the work is ``tttembed.api.chain_search``,
``chain_train`` and ``chain_eval``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from tttembed import api
from tttembed.chain.forms import DEFAULT_MAX_SEQ_LENGTH
from tttembed.chain.regimes import REGIMES
from tttembed.cli._common import (
    console,
    emit_json,
    handle_errors,
    json_mode,
    progress_group,
    quiet_libraries,
)
from tttembed.cli._options import JsonOpt, OverwriteOpt, QuietOpt
from tttembed.core.io import refuse_existing
from tttembed.embed.base import DEFAULT_EMBEDDER

app = typer.Typer(help="Multi-hop chain retrieval with on-policy state training.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)

#: Printed under every chain metrics table.
LEGEND = ("legend: C@k = share of questions whose whole gold chain is in the top k; "
          "recall@k = share of gold passages in the top k (both 0-1, 4 decimals; "
          "results.json and report.md keep percentages); T = chain steps")
COLUMNS = ("C@5", "C@10", "recall@5", "recall@10")

DataArg = Annotated[Path, typer.Argument(metavar="DATA",
    help="Multi-hop folder (corpus.jsonl + chains_<split>.jsonl).", show_default=False)]
ChainSplitOpt = Annotated[str, typer.Option(help="Which chains_<split>.jsonl to use.")]
ChainIndexOpt = Annotated[Optional[Path], typer.Option(
    "--index", "-i", help="Frozen passage index: a FAISS folder, milvus:URI/COLLECTION or "
    "qdrant:URL_OR_PATH/COLLECTION (built there when absent; default: a folder in the cache).")]
ChainEmbedderOpt = Annotated[str, typer.Option(
    "--embedder", "-e", help="Frozen passage encoder (an st: spec).")]
StepsOpt = Annotated[int, typer.Option(help="Chain steps T (0 = the data's max hops).", min=0)]
MaxQOpt = Annotated[Optional[int], typer.Option(help="Use only the first N questions.", min=1)]
SeqLenOpt = Annotated[Optional[int], typer.Option(
    help="State token limit (question plus the passages found). Default: the limit the "
         "encoder was trained with (its checkpoint records it); 128 for the untrained "
         "model.", min=8)]
TrainSeqLenOpt = Annotated[int, typer.Option(
    help="State token limit to train at (recorded in the checkpoint; every reader uses "
         "it).", min=8)]
StateOpt = Annotated[Optional[str], typer.Option(
    "--chain-state", help="State form: text (the passages' title and text) or entities "
    "(each passage's first 3 names and years: cheaper, and as good or better with the "
    "untrained model). Default: the form the encoder was trained on; entities for the "
    "untrained model.")]
TrainStateOpt = Annotated[str, typer.Option(
    "--chain-state", help="State form to train on: text or entities (recorded in the "
    "checkpoint; every reader uses it).")]


def _fraction(value: Any) -> str:
    """A percentage from the API as a 0-1 fraction with 4 decimals (– when missing)."""
    if value is None or value != value:
        return "–"
    return f"{float(value) / 100:.4f}"


def _metrics_table(title: str, metrics: Mapping[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("questions")
    for c in (*COLUMNS, "n"):
        table.add_column(c, justify="right")
    rows = [("all", metrics["all"])] + [(f"{h}-hop", m) for h, m in metrics["by_hops"].items()]
    for label, m in rows:
        table.add_row(label, *[_fraction(m[c]) for c in COLUMNS], str(m["n"]))
    console.print(table)
    console.print(LEGEND, style="dim")


def _systems_table(title: str, results: Mapping[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("system", no_wrap=True)
    for c in COLUMNS:
        table.add_column(c, justify="right")
    table.add_column("s/q", justify="right")
    latency = results["latency_s_per_question"]
    for name, m in results["systems"].items():
        table.add_row(name, *[_fraction(m["all"][c]) for c in COLUMNS],
                      f"{latency.get(name, float('nan')):.4f}")
    console.print(table)
    console.print(LEGEND + "; s/q = seconds per question", style="dim")


def _encoder(item: str) -> tuple[str, str]:
    """``NAME=CHECKPOINT`` or ``CHECKPOINT`` (named after its folder): one syntax for
    ``chain search`` and ``chain eval``."""
    name, sep, path = item.partition("=")
    if not sep:
        name, path = Path(item).name, item
    if not name or not path:
        raise typer.BadParameter(f"expected CHECKPOINT or NAME=CHECKPOINT, got {item!r}",
                                 param_hint="--encoder")
    return name, path


def _encoders(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        name, path = _encoder(item)
        if name in out:
            raise typer.BadParameter(f"encoder name {name!r} given twice",
                                     param_hint="--encoder")
        out[name] = path
    return out


@app.command()
@handle_errors
def search(data: DataArg, split: ChainSplitOpt = "test", index: ChainIndexOpt = None,
           embedder: ChainEmbedderOpt = DEFAULT_EMBEDDER,
           encoder: Annotated[Optional[str], typer.Option(
               help="Trained encoder: CHECKPOINT folder or NAME=CHECKPOINT, as in chain "
                    "eval (default: the untrained model).")]
           = None,
           steps: Annotated[Optional[int], typer.Option(
               help="Chain steps T (default: the encoder's T, as `serve --chain` answers: "
                    "the checkpoint's, 2 for the untrained model; 0 = the data's max "
                    "hops).", min=0)] = None,
           beam: Annotated[int, typer.Option(help="Beam width (1 = greedy).", min=1)] = 1,
           max_questions: MaxQOpt = None, max_seq_length: SeqLenOpt = None,
           chain_state: StateOpt = None,
           out: Annotated[Optional[Path], typer.Option(
               "--out", "-o", help="Write the final rankings here as a run file (.trec, "
               "or .jsonl / .json for JSON lines).")] = None,
           overwrite: OverwriteOpt = False, quiet: QuietOpt = False,
           as_json: JsonOpt = False) -> None:
    """Chain retrieval for every question of a split; prints C@k and recall@k."""
    quiet_libraries()
    if out is not None:
        refuse_existing(out, overwrite, "run file")  # before the search, not after
    checkpoint = _encoder(encoder)[1] if encoder else None
    with json_mode(as_json), progress_group(not quiet) as progress:
        result = api.chain_search(data, split=split, index=index, embedder=embedder,
                                  encoder=checkpoint, steps=steps, beam=beam,
                                  max_questions=max_questions,
                                  max_seq_length=max_seq_length, state=chain_state,
                                  progress=progress)
        kind = "greedy" if beam == 1 else f"beam {beam}"
        _metrics_table(f"chain search ({kind}, T={result.steps}) on {data.name}/{split}",
                       result.metrics)
        if out is not None:
            api.write_run(result.to_run(), out, overwrite=overwrite)
            console.print(f"run written to {out}")
    if as_json:
        emit_json({"data": str(data), "split": split, "encoder": checkpoint, "beam": beam,
                   "steps": result.steps, "metrics": result.metrics,
                   "run": str(out) if out else None})


@app.command()
@handle_errors
def train(data: DataArg,
          out: Annotated[Path, typer.Option(
              "--out", "-o", help="Checkpoint folder (resumed when it holds an unfinished "
              "run of the same configuration).", show_default=False)],
          regime: Annotated[str, typer.Option(
              help="Training states: " + " | ".join(REGIMES) + ".")] = "gold",
          states_from: Annotated[Optional[Path], typer.Option(
              help="Gold-trained checkpoint that supplies reached states (static, "
                   "resampled, on-policy).")] = None,
          split: ChainSplitOpt = "train", index: ChainIndexOpt = None,
          embedder: ChainEmbedderOpt = DEFAULT_EMBEDDER,
          epochs: Annotated[int, typer.Option(help="Training epochs.", min=1)] = 3,
          batch_size: Annotated[int, typer.Option(help="States per batch.", min=1)] = 32,
          lr: Annotated[float, typer.Option(help="AdamW learning rate.", min=0.0)] = 2e-4,
          n_neg: Annotated[int, typer.Option(help="Negatives per state.", min=1)] = 32,
          shared_negatives: Annotated[bool, typer.Option(
              help="One negative pool per question (the question's frozen top-100).")] = False,
          steps: StepsOpt = 0,
          seed: Annotated[int, typer.Option(help="Seed of sampling, order and init.")] = 0,
          max_questions: MaxQOpt = None,
          max_seq_length: TrainSeqLenOpt = DEFAULT_MAX_SEQ_LENGTH,
          chain_state: TrainStateOpt = "text",
          overwrite: OverwriteOpt = False, quiet: QuietOpt = False) -> None:
    """Train the LoRA query encoder on gold, synthetic or reached states."""
    quiet_libraries()
    with progress_group(not quiet) as progress:
        result = api.chain_train(data, out, regime=regime, states_from=states_from,
                                 split=split, index=index, embedder=embedder, epochs=epochs,
                                 batch_size=batch_size, lr=lr, n_neg=n_neg,
                                 shared_negatives=shared_negatives, steps=steps, seed=seed,
                                 max_questions=max_questions,
                                 max_seq_length=max_seq_length, state=chain_state,
                                 overwrite=overwrite, progress=progress)
    for row in result.history:
        secs = ", ".join(f"{k} {v:.1f}" for k, v in row["seconds"].items())
        console.print(f"epoch {row['epoch']}: {row['gold_states']} gold + "
                      f"{row['other_states']} other states, loss {row['loss']:.4f} "
                      f"(seconds: {secs})")
    console.print(f"checkpoint: {result.path} ({result.epochs_done} epochs)")


@app.command("eval")
@handle_errors
def eval_(data: DataArg,
          out: Annotated[Path, typer.Option(
              "--out", "-o", help="Report folder (results.json, report.md, PNG plots); "
              "written whole or not at all.", show_default=False)],
          encoder: Annotated[Optional[list[str]], typer.Option(
              help="Trained encoder: NAME=CHECKPOINT, or CHECKPOINT (named after its "
                   "folder); repeat. The untrained model is always included as "
                   "'untrained'.")] = None,
          reference: Annotated[Optional[str], typer.Option(
              help="Encoder whose reached states form the fixed analysis set "
                   "(default: the first trained encoder).")] = None,
          beam: Annotated[int, typer.Option(help="Beam width for the beam baseline "
                                                 "(1 = none).", min=1)] = 4,
          beam_encoder: Annotated[Optional[list[str]], typer.Option(
              help="Encoder run with beam search; repeat (default: the reference).")] = None,
          split: ChainSplitOpt = "test", index: ChainIndexOpt = None,
          embedder: ChainEmbedderOpt = DEFAULT_EMBEDDER,
          steps: StepsOpt = 0, max_questions: MaxQOpt = None,
          max_seq_length: SeqLenOpt = None, chain_state: StateOpt = None,
          overwrite: OverwriteOpt = False, quiet: QuietOpt = False,
          as_json: JsonOpt = False) -> None:
    """C@k / recall@k, state mismatch, recovery and deletion analyses, latency."""
    encoders = _encoders(encoder)
    quiet_libraries()
    with json_mode(as_json), progress_group(not quiet) as progress:
        results = api.chain_eval(data, out, encoders=encoders, reference=reference,
                                 beam=beam, beam_encoders=beam_encoder, split=split,
                                 index=index, embedder=embedder, steps=steps,
                                 max_questions=max_questions,
                                 max_seq_length=max_seq_length, state=chain_state,
                                 overwrite=overwrite, progress=progress)
        n = next(iter(results["systems"].values()))["all"]["n"]
        _systems_table(f"chain eval on {data.name}/{split} ({n} questions)", results)
        console.print(f"report written to {out}")
    if as_json:
        emit_json({"report": str(out), **results})
