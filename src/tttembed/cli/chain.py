"""``tttembed chain search | train | eval``: the multi-hop chain retriever."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_bar, quiet_libraries

app = typer.Typer(help="Multi-hop chain retrieval with on-policy state training.",
                  no_args_is_help=True, add_completion=False)

REGIME_HELP = "gold | synthetic | synthetic-resampled | static | resampled | on-policy"

Data = Annotated[Path, typer.Argument(help="Multi-hop folder (corpus.jsonl + "
                                           "chains_<split>.jsonl).")]
Split = Annotated[str, typer.Option(help="Which chains_<split>.jsonl to use.")]
IndexOpt = Annotated[Optional[Path], typer.Option(
    "--index", help="Passage index folder (built there when absent; default: in the cache).")]
Embedder = Annotated[str, typer.Option(help="Frozen passage encoder (an st: spec).")]
Steps = Annotated[int, typer.Option(help="Chain steps T (0 = the data's max hops).", min=0)]
MaxQ = Annotated[Optional[int], typer.Option(help="Use only the first N questions.", min=1)]
SeqLen = Annotated[int, typer.Option(help="State token limit of the query encoder.", min=8)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


def _metrics_table(title: str, metrics: dict) -> None:
    from rich.table import Table

    table = Table(title=title)
    cols = ["C@5", "C@10", "recall@5", "recall@10", "n"]
    table.add_column("questions")
    for c in cols:
        table.add_column(c, justify="right")
    rows = [("all", metrics["all"])] + [(f"{h}-hop", m) for h, m in metrics["by_hops"].items()]
    for label, m in rows:
        table.add_row(label, *[str(m[c]) for c in cols])
    console.print(table)


def _load(data: Path, split: str, index: Path | None, embedder: str, max_questions: int | None,
          quiet: bool):
    from tttembed.chain import api

    quiet_libraries()
    with progress_bar("embedding passages", None, not quiet) as advance:
        return api.load(data, split, index, embedder=embedder, max_questions=max_questions,
                        progress=advance)


@app.command()
@handle_errors
def search(data: Data, split: Split = "test", index: IndexOpt = None,
           embedder: Embedder = "st:bundled:all-MiniLM-L6-v2",
           adapter: Annotated[Optional[Path], typer.Option(
               help="Trained encoder checkpoint (default: the untrained model).")] = None,
           steps: Steps = 0,
           beam: Annotated[int, typer.Option(help="Beam width (1 = greedy).", min=1)] = 1,
           max_questions: MaxQ = None, max_seq_length: SeqLen = 256,
           out: Annotated[Optional[Path], typer.Option(
               help="Write the final rankings as a BEIR run JSON here.")] = None,
           quiet: Quiet = False) -> None:
    """Chain retrieval for every question of a split; prints C@k and recall@k."""
    from tttembed.chain import api

    loaded = _load(data, split, index, embedder, max_questions, quiet)
    encode = api.query_encoder(loaded, adapter, max_seq_length)
    total = steps or loaded.task.max_hops
    with progress_bar("chain steps", total, not quiet) as advance:
        run = api.run_search(loaded, encode, steps=total, beam=beam,
                             max_seq_length=max_seq_length, progress=advance)
    metrics = api.search_metrics(run, loaded)
    kind = "greedy" if beam == 1 else f"beam {beam}"
    _metrics_table(f"chain search ({kind}, T={total}) on {data.name}/{split}", metrics)
    if out is not None:
        api.write_json(out, api.run_to_beir(run, loaded))
        console.print(f"run written to {out}")


@app.command()
@handle_errors
def train(data: Data,
          out: Annotated[Path, typer.Option(help="Checkpoint folder (resumed when it "
                                                 "holds an unfinished run).")],
          regime: Annotated[str, typer.Option(help=REGIME_HELP)] = "gold",
          states_from: Annotated[Optional[Path], typer.Option(
              help="Gold-trained checkpoint that supplies reached states (static, "
                   "resampled, on-policy).")] = None,
          split: Split = "train", index: IndexOpt = None,
          embedder: Embedder = "st:bundled:all-MiniLM-L6-v2",
          epochs: Annotated[int, typer.Option(min=1)] = 3,
          batch_size: Annotated[int, typer.Option(min=1)] = 32,
          lr: Annotated[float, typer.Option(min=0.0)] = 2e-4,
          n_neg: Annotated[int, typer.Option(help="Negatives per state.", min=1)] = 32,
          shared_negatives: Annotated[bool, typer.Option(
              help="One negative pool per question (the question's frozen top-100).")] = False,
          steps: Steps = 0, seed: int = 0, max_questions: MaxQ = None,
          max_seq_length: SeqLen = 256,
          overwrite: Annotated[bool, typer.Option(help="Replace a checkpoint made with "
                                                       "another configuration.")] = False,
          quiet: Quiet = False) -> None:
    """Train the LoRA query encoder on gold, synthetic or reached states."""
    from tttembed.chain.regimes import REGIMES
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import TrainConfig, train_chain

    if regime not in REGIMES:
        raise typer.BadParameter(f"unknown regime {regime!r}; choose one of "
                                 f"{', '.join(REGIMES)}", param_hint="--regime")
    cfg = TrainConfig(regime=regime, epochs=epochs, batch_size=batch_size, lr=lr, n_neg=n_neg,
                      steps=steps, max_seq_length=max_seq_length, seed=seed,
                      shared_negatives=shared_negatives, base=embedder)
    cfg.check()
    loaded = _load(data, split, index, embedder, max_questions, quiet)
    with progress_bar("training", None, not quiet) as advance:
        result = train_chain(loaded.task, loaded.index, frozen_encode(loaded.embedder), cfg,
                             out, states_from=states_from, overwrite=overwrite,
                             progress=lambda phase, done, total: advance(1))
    for row in result.history:
        console.print(f"epoch {row['epoch']}: {row['gold_states']} gold + "
                      f"{row['other_states']} other states, loss {row['loss']}, "
                      f"seconds {row['seconds']}")
    console.print(f"checkpoint: {result.path} ({result.epochs_done} epochs)")


@app.command("eval")
@handle_errors
def eval_(data: Data,
          out: Annotated[Path, typer.Option(help="Report folder (results.json, report.md, "
                                                 "PNG plots).")],
          encoder: Annotated[Optional[list[str]], typer.Option(
              help="NAME=CHECKPOINT of a trained encoder; repeat. The untrained model is "
                   "always included as 'untrained'.")] = None,
          reference: Annotated[Optional[str], typer.Option(
              help="Encoder whose reached states form the fixed analysis set "
                   "(default: the first trained encoder).")] = None,
          beam: Annotated[int, typer.Option(help="Beam width for the beam baseline "
                                                 "(1 = none).", min=1)] = 4,
          beam_encoder: Annotated[Optional[list[str]], typer.Option(
              help="Encoders run with beam search (default: the reference).")] = None,
          split: Split = "test", index: IndexOpt = None,
          embedder: Embedder = "st:bundled:all-MiniLM-L6-v2",
          steps: Steps = 0, max_questions: MaxQ = None, max_seq_length: SeqLen = 256,
          quiet: Quiet = False) -> None:
    """C@k / recall@k, state mismatch, recovery and deletion analyses, latency."""
    from tttembed.chain import api

    encoders: list[tuple[str, Optional[str]]] = [("untrained", None)]
    for item in encoder or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"expected NAME=CHECKPOINT, got {item!r}",
                                     param_hint="--encoder")
        encoders.append((name, path))
    ref = reference or (encoders[1][0] if len(encoders) > 1 else "untrained")
    beams = beam_encoder if beam_encoder is not None else [ref]
    loaded = _load(data, split, index, embedder, max_questions, quiet)
    total = steps or loaded.task.max_hops
    results = api.run_eval(loaded, encoders, steps=total, beam=beam, beam_encoders=beams,
                           reference=ref, max_seq_length=max_seq_length,
                           progress=None if quiet else lambda msg: console.print(msg))
    config = {"data": str(data), "split": split, "embedder": embedder, "steps": total,
              "beam": beam, "encoders": dict(encoders), "reference": ref,
              "n_questions": len(loaded.task.golds), "max_seq_length": max_seq_length,
              "device": str(loaded.embedder.model.device)}   # the latencies depend on it
    api.write_report(out, config, results)
    for name, m in results["systems"].items():
        _metrics_table(name, m)
    console.print(f"report written to {out}")
