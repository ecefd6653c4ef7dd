"""``tttembed pairs export``: the judged pairs of a reward ledger or a feedback store as
JSONL, for a fine-tune (the work is :mod:`tttembed.tune.export`); ``tttembed pairs train``:
the full fine-tune on exported triplets (:mod:`tttembed.tune.train`, :mod:`tttembed.tune.model`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.cli._common import console, handle_errors, progress_group
from tttembed.cli._options import OverwriteOpt, QuietOpt

app = typer.Typer(help="Judged (query, document) pairs as training data.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)

SourceArg = Annotated[str, typer.Argument(
    metavar="LEDGER_OR_STORE", show_default=False,
    help="A reward ledger (SQLite: ledger.sqlite in the cache folder, or learn's --ledger) "
         "or a feedback store (a registry's loop.sqlite, or its postgresql:// URL); told "
         "apart by their tables.")]
PairsOutOpt = Annotated[Path, typer.Option(
    "--out", "-o", show_default=False,
    help="The JSONL file to write (refused when it exists, unless --overwrite).")]
PairsDataOpt = Annotated[Optional[Path], typer.Option(
    "--data", show_default=False,
    help="The BEIR folder the pairs were judged on (corpus.jsonl, queries.jsonl): the "
         "texts of the ledger's digests and of the store's document ids. Required.")]
FormatOpt = Annotated[str, typer.Option(
    "--format", help="pairs: one row per judged pair (query_id, query, doc_id, doc_text, "
    "reward, source, trusted); triplets: anchor, positive, negative rows, the columns "
    "sentence-transformers' trainers read (a positive with one of its query's judged "
    "negatives).")]
ThresholdOpt = Annotated[float, typer.Option(
    "--threshold", help="--format triplets: the reward at or above which a judged pair is "
    "a positive, in (0, 1] (rewards are on [0, 1]).")]
LabelsOpt = Annotated[bool, typer.Option(
    "--labels", help="A store: add people's labels (POST /v1/feedback; source label, "
    "trusted).")]
PairsClicksOpt = Annotated[bool, typer.Option(
    "--clicks", help="A store: add the debiased click rewards the learner estimated "
    "(source clicks, trusted as the store says).")]
ScorerKeyOpt = Annotated[Optional[str], typer.Option(
    "--scorer", show_default=False,
    help="A ledger: only the pairs of this scorer key (the scorer's spec or identity); "
         "default: every key, each pair with its key as its source.")]


@app.command("export")
@handle_errors
def export(
    source: SourceArg,
    out: PairsOutOpt,
    data: PairsDataOpt = None,
    layout: FormatOpt = "pairs",
    threshold: ThresholdOpt = 0.5,
    labels: LabelsOpt = False,
    clicks: PairsClicksOpt = False,
    scorer: ScorerKeyOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Write the judged pairs of a reward ledger or a feedback store as JSONL."""
    from tttembed.core.io import refuse_existing
    from tttembed.tune.export import PAIR_FORMATS, read_judged, write_pairs
    from tttembed.tune.pairs import check_threshold

    if layout not in PAIR_FORMATS:
        raise typer.BadParameter(f"{layout!r} is not one of {', '.join(PAIR_FORMATS)}",
                                 param_hint="--format")
    check_threshold(threshold)
    refuse_existing(out, overwrite, "output")  # before reading, not after
    got = read_judged(source, data, scorer=scorer, labels=labels, clicks=clicks)
    written = write_pairs(out, got.pairs, layout=layout, threshold=threshold,
                          overwrite=overwrite)
    made = written.triplets
    if made is None:
        sources = "; ".join(f"{k}: {n:,}" for k, n in got.by_source().items())
        console.print(f"wrote {written.rows:,} pairs ({sources}) of the {got.origin} "
                      f"to {written.path}")
    else:
        console.print(f"wrote {written.rows:,} triplets of the {got.origin} to "
                      f"{written.path}: {made.positives:,} positives (positive = reward >= "
                      f"{made.threshold:g}), {made.without_negative:,} left out for lack "
                      "of a judged negative of their query")
    what = "queries/corpus" if got.kind == "ledger" else "corpus"
    if got.unresolved:
        print(f"note: {got.unresolved:,} pairs of the {got.kind} are not in {data}'s "
              f"{what} (judged on other data; left out)", file=sys.stderr)
    if got.missing:
        print(f"note: {got.missing:,} pairs recorded without a reward (the scorer gave "
              "none) left out", file=sys.stderr)


TripletsArg = Annotated[Path, typer.Argument(
    metavar="TRIPLETS", show_default=False,
    help="A triplet file: 'tttembed pairs export ... --format triplets' (anchor, positive, "
         "negative JSONL rows).")]
ModelOutOpt = Annotated[Path, typer.Option(
    "--out", "-o", show_default=False,
    help="The model folder to write (a sentence-transformers folder: index a corpus with "
         "it by --embedder st:FOLDER); refused when it exists, unless --overwrite.")]
BaseOpt = Annotated[str, typer.Option(
    "--base", help="The embedder to fine-tune (an st: spec); the corpus must be re-embedded "
    "with the result.")]
EpochsOpt = Annotated[int, typer.Option("--epochs", min=1, help="Passes over the triplets.")]
LrOpt = Annotated[float, typer.Option("--lr", min=0.0, help="AdamW learning rate "
                                      "(10% linear warm-up, then linear decay).")]
BatchOpt = Annotated[int, typer.Option("--batch-size", min=1, help="Triplets per step; each "
                                       "query is scored against every positive and negative "
                                       "of its batch.")]
TrainSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the batches and of torch: "
                                           "the same triplets and seed give the same model.")]


@app.command("train")
@handle_errors
def train(
    triplets_file: TripletsArg,
    out: ModelOutOpt,
    base: BaseOpt = "st:bundled:all-MiniLM-L6-v2",
    epochs: EpochsOpt = 1,
    lr: LrOpt = 2e-5,
    batch_size: BatchOpt = 16,
    seed: TrainSeedOpt = 0,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Fine-tune the whole embedder on judged triplets (MultipleNegativesRankingLoss with
    the judged hard negatives) and write it as a model folder. Then re-index with it
    ('tttembed index DATA --embedder st:FOLDER') and learn states again on that index."""
    from tttembed.core.io import refuse_existing
    from tttembed.tune.export import read_triplets
    from tttembed.tune.model import save_tuned
    from tttembed.tune.train import TuneSettings, fine_tune

    settings = TuneSettings(mode="full", epochs=epochs, lr=lr, batch_size=batch_size,
                            seed=seed, base=base).check()
    refuse_existing(out, overwrite, "model folder")  # before the work, not after
    rows = read_triplets(triplets_file)
    with progress_group(not quiet) as stage:
        advance = stage(f"fine-tuning on {len(rows):,} triplets", None)
        tuned = fine_tune(rows, settings, progress=lambda step, steps, loss: advance(1))
    path = save_tuned(tuned, rows, out, source=str(triplets_file), overwrite=overwrite)
    console.print(f"fine-tuned {base} on {len(rows):,} triplets ({len(tuned.losses):,} steps, "
                  f"loss {tuned.losses[0]:.3f} -> {tuned.losses[-1]:.3f}, "
                  f"{tuned.train_s:.0f} s) -> {path}; index with --embedder st:{path}")
