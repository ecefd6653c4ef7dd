"""The chain retriever's public Python API: :func:`chain_search`, :func:`chain_train` and
:func:`chain_eval` (``tttembed.api`` re-exports them unchanged; ``tttembed chain search |
train | eval`` call them and only print).

    >>> from tttembed import api
    >>> res = api.chain_search("data/2wiki", split="test", max_questions=100)
    >>> res.metrics["all"]["C@5"]                      # percent of complete chains
    >>> api.chain_train("data/2wiki", "ckpt/gold", regime="gold")
    >>> api.chain_eval("data/2wiki", "reports/chain", encoders={"gold": "ckpt/gold"})

Metric scale: the returned metric dicts, results.json and report.md hold percentages
(0-100, two decimals), as the published ``docs/results-chain`` tables do; the CLI prints
them as fractions (0-1, four decimals).

Light at import time: torch, transformers, sentence-transformers and peft are imported by
the functions that need them. ``progress`` is the one progress protocol
(``tttembed.core.progress.Progress``): each long stage is opened with its name and total.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tttembed.chain.analysis import evaluate_chain
from tttembed.chain.checkpoint import (
    default_steps,
    read_checkpoint_manifest,
    state_settings,
    trained_settings,
)
from tttembed.chain.forms import TEXT, StateSettings
from tttembed.chain.online import chain_run
from tttembed.chain.regimes import NEEDS_RUN, REGIMES
from tttembed.chain.report import write_chain_report
from tttembed.chain.search import ChainRun, Encode, chain_metrics
from tttembed.chain.setup import (
    DEFAULT_MAX_SEQ_LENGTH,
    Loaded,
    frozen_encode,
    load,
    state_texts,
)
from tttembed.chain.train import TrainConfig, TrainResult, train_chain
from tttembed.core.errors import ConfigError
from tttembed.core.io import refuse_existing
from tttembed.core.progress import Advance, Progress, stage
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.types import PathLike

UNTRAINED = "untrained"
_NO_ENCODERS: Mapping[str, PathLike] = MappingProxyType({})


@dataclass(frozen=True)
class ChainSearchResult:
    """What :func:`chain_search` returns.

    ``run``: the ChainRun (index rows); ``metrics``: C@k and recall@k in percent,
    ``{"all": {...}, "by_hops": {hops: {...}}}``; ``qids``: the question ids in run order;
    ``doc_ids``: index row -> document id; ``steps``: the chain steps T that ran;
    ``beam``: the beam width (1 = greedy).
    """

    run: ChainRun
    metrics: dict[str, Any]
    qids: tuple[str, ...]
    doc_ids: Sequence[str]
    steps: int
    beam: int

    def to_run(self) -> dict[str, dict[str, float]]:
        """The final rankings as a BEIR run ``{qid: {doc_id: score}}``; scores decrease
        along each ranking (rank-based: ``1 / (1 + rank)``)."""
        return {qid: {self.doc_ids[int(r)]: 1.0 / (1 + pos)
                      for pos, r in enumerate(self.run.ranking[i]) if r >= 0}
                for i, qid in enumerate(self.qids)}


# --- lower-level helpers (also used by benchmarks/bench_chain.py) ---------------------------

def query_encoder(loaded: Loaded, encoder: PathLike | None, max_seq_length: int | None,
                  transfer: bool = False) -> Encode:
    """The frozen model's query side (``encoder`` None) or a trained checkpoint's encoder
    (trained against this index; ``transfer``: against any corpus of the same embedder)."""
    if encoder is None:
        return frozen_encode(loaded.embedder)
    from tttembed.chain.checkpoint import load_encoder

    return load_encoder(encoder, max_seq_length=max_seq_length, index=loaded.index,
                        transfer=transfer).encode


def run_search(loaded: Loaded, encode: Encode, *, steps: int | None = None, beam: int = 1,
               max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH, depth: int = 100,
               progress: Advance | None = None, form: str = TEXT) -> ChainRun:
    """Greedy (``beam`` 1) or beam chain search of every question of ``loaded``, its states
    of ``form`` cut to ``max_seq_length`` tokens."""
    task = loaded.task
    texts = state_texts(task, loaded.embedder.model, max_seq_length, form)
    return chain_run(len(task.golds), texts, encode, loaded.index.search,
                     steps=steps or task.max_hops, beam=beam, depth=depth, keep=depth,
                     progress=progress)


def _check_names(names: Sequence[str], wanted: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise ConfigError("encoder names must be distinct")
    for name in wanted:
        if name not in names:
            raise ConfigError(f"unknown encoder name {name!r}; known: {', '.join(names)}")


def run_chain_eval(loaded: Loaded, encoders: Sequence[tuple[str, PathLike | None]], *,
                   steps: int | None = None, beam: int = 4, beam_encoders: Sequence[str] = (),
                   reference: str | None = None, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                   progress: Progress | None = None, form: str = TEXT) -> dict[str, Any]:
    """Evaluate named encoders ((name, checkpoint folder or None for the untrained model)),
    every one on the same states (``form``, ``max_seq_length``)."""
    names = [n for n, _ in encoders]
    _check_names(names, [*beam_encoders, *([reference] if reference else [])])
    # an evaluation may measure transfer: an encoder trained on another corpus (same
    # embedder) is evaluated here, and chain_eval records which were
    fns = {name: query_encoder(loaded, path, max_seq_length, transfer=True)
           for name, path in encoders}
    texts = state_texts(loaded.task, loaded.embedder.model, max_seq_length, form)
    return evaluate_chain(loaded.task.golds, texts, loaded.index.search, fns,
                          steps=steps or loaded.task.max_hops, reference=reference,
                          beam_width=beam, beam_encoders=beam_encoders, progress=progress)


def eval_settings(encoders: Sequence[tuple[str, PathLike | None]],
                  max_seq_length: int | None, form: str | None) -> StateSettings:
    """The one state setting an evaluation runs every encoder on: the one asked for, else
    the one the trained encoders record (refused when they record different ones), else
    the untrained encoder's."""
    trained = {name: trained_settings(path) for name, path in encoders if path is not None}
    found = set(trained.values()) or {trained_settings(None)}
    if len(found) > 1 and (max_seq_length is None or form is None):
        said = ", ".join(f"{n}: {s.form} at {s.max_seq_length} tokens"
                         for n, s in trained.items())
        raise ConfigError(f"the encoders were trained on different states ({said}); an "
                          "evaluation reads one: give --max-seq-length and --chain-state")
    own = next(iter(found))
    return state_settings(None, own.max_seq_length if max_seq_length is None
                          else max_seq_length, own.form if form is None else form)


def _check_common(steps: int, max_questions: int | None, max_seq_length: int) -> None:
    if steps < 0:
        raise ConfigError("steps must be 0 (the data's max hops) or more")
    if max_questions is not None and max_questions < 1:
        raise ConfigError("max_questions must be at least 1")
    if max_seq_length < 8:
        raise ConfigError("max_seq_length must be at least 8")


# --- the public API -----------------------------------------------------------------------

def chain_search(data: PathLike, *, split: str = "test", index: PathLike | None = None,
                 embedder: str = DEFAULT_EMBEDDER, encoder: PathLike | None = None,
                 steps: int | None = None, beam: int = 1,
                 max_questions: int | None = None,
                 max_seq_length: int | None = None, state: str | None = None,
                 progress: Progress | None = None) -> ChainSearchResult:
    """Chain retrieval for every question of a split of a multi-hop folder.

    ``data`` holds corpus.jsonl and chains_<split>.jsonl; ``index`` is the frozen passage
    index folder (built there when absent; default: in the cache); ``encoder`` a trained
    checkpoint folder (None: the untrained model); ``steps`` the chain steps T (None:
    the encoder's T, as ``serve --chain`` answers: the checkpoint's, 2 for the untrained
    model; 0: the data's max hops); ``beam`` the beam width (1: greedy);
    ``max_seq_length`` and ``state`` (the state form, ``text`` or ``entities``) None: those
    the encoder was trained with (the untrained model: 128 and text). Metrics are
    percentages.

        >>> from tttembed import api
        >>> res = api.chain_search("data/2wiki", encoder="ckpt/gold", beam=4)
        >>> res.metrics["all"]["C@5"], len(res.to_run())
    """
    if beam < 1:
        raise ConfigError("beam must be at least 1")
    if steps is None:
        steps = default_steps(encoder)
    settings = state_settings(encoder, max_seq_length, state)
    _check_common(steps, max_questions, settings.max_seq_length)
    loaded = load(data, split, index, embedder=embedder, max_questions=max_questions,
                  progress=progress)
    encode = query_encoder(loaded, encoder, settings.max_seq_length)
    total = steps or loaded.task.max_hops
    advance = stage(progress, "chain steps", total * len(loaded.task.golds))
    run = run_search(loaded, encode, steps=total, beam=beam,
                     max_seq_length=settings.max_seq_length, progress=advance,
                     form=settings.form)
    return ChainSearchResult(run, chain_metrics(run.ranking, loaded.task.golds),
                             tuple(c.qid for c in loaded.task.chains), loaded.index.doc_ids,
                             total, beam)


def chain_train(data: PathLike, out: PathLike, *, regime: str = "gold",
                states_from: PathLike | None = None, split: str = "train",
                index: PathLike | None = None, embedder: str = DEFAULT_EMBEDDER,
                epochs: int = 3, batch_size: int = 32, lr: float = 2e-4, n_neg: int = 32,
                shared_negatives: bool = False, steps: int = 0, seed: int = 0,
                max_questions: int | None = None,
                max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH, state: str = TEXT,
                overwrite: bool = False, progress: Progress | None = None) -> TrainResult:
    """Train (or resume) the LoRA query encoder of the chain retriever into ``out``.

    ``regime`` is one of ``REGIMES`` (gold, synthetic, synthetic-resampled, static,
    resampled, on-policy); static / resampled / on-policy need ``states_from``, a
    gold-trained checkpoint. ``out`` is resumed when it holds an unfinished run of the same
    configuration; another configuration (or a folder that is no checkpoint) is refused
    unless ``overwrite``.

        >>> from tttembed import api
        >>> gold = api.chain_train("data/2wiki", "ckpt/gold", regime="gold", epochs=3)
        >>> api.chain_train("data/2wiki", "ckpt/op", regime="on-policy", states_from=gold.path)
    """
    if regime not in REGIMES:
        raise ConfigError(f"unknown regime {regime!r}; choose one of {', '.join(REGIMES)}")
    if regime in NEEDS_RUN and states_from is None:
        raise ConfigError(f"regime {regime!r} needs --states-from (states_from): a "
                          "gold-trained checkpoint (train one with --regime gold first)")
    if states_from is not None:
        read_checkpoint_manifest(states_from)
    _check_common(steps, max_questions, max_seq_length)
    cfg = TrainConfig(regime=regime, epochs=epochs, batch_size=batch_size, lr=lr,
                      n_neg=n_neg, steps=steps, max_seq_length=max_seq_length,
                      state=state, seed=seed,
                      shared_negatives=shared_negatives, base=embedder)
    cfg.check()
    loaded = load(data, split, index, embedder=embedder, max_questions=max_questions,
                  progress=progress)
    return train_chain(loaded.task, loaded.index, frozen_encode(loaded.embedder), cfg, out,
                       states_from=states_from, overwrite=overwrite, progress=progress)


def _transfer(named: Sequence[tuple[str, PathLike | None]], loaded: Loaded) -> list[str]:
    """The encoders trained against another corpus than the index's (a transfer)."""
    mine = loaded.index.manifest.get("corpus_fingerprint")
    return [name for name, path in named if path is not None and mine and
            read_checkpoint_manifest(path).get("corpus_fingerprint") not in (None, mine)]


def _named_encoders(encoders: Mapping[str, PathLike]) -> list[tuple[str, PathLike | None]]:
    if UNTRAINED in encoders:
        raise ConfigError(f"the encoder name {UNTRAINED!r} is reserved for the untrained "
                          "model (always included)")
    for name, path in encoders.items():
        if not name:
            raise ConfigError("encoder names must not be empty")
        read_checkpoint_manifest(path)
    return [(UNTRAINED, None), *encoders.items()]


def chain_eval(data: PathLike, out: PathLike, *,
               encoders: Mapping[str, PathLike] = _NO_ENCODERS, reference: str | None = None,
               beam: int = 4, beam_encoders: Sequence[str] | None = None,
               split: str = "test", index: PathLike | None = None,
               embedder: str = DEFAULT_EMBEDDER, steps: int = 0,
               max_questions: int | None = None,
               max_seq_length: int | None = None, state: str | None = None,
               overwrite: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Evaluate trained encoders (``{name: checkpoint folder}``) against the untrained model
    (always included as "untrained") and write the report folder ``out``.

    Runs single-shot, greedy chain and (``beam`` > 1) beam search for ``beam_encoders``
    (default: the reference), C@k / recall@k, state mismatch, next-step success and the
    deletion counterfactual on the states reached by ``reference`` (default: the first
    trained encoder), and latency. ``out`` (results.json, report.md, completeness.png,
    mismatch.png, recovery.png) is written whole or not at all; an existing ``out`` is
    refused unless ``overwrite``. Returns the results as in results.json (percentages).

        >>> from tttembed import api
        >>> res = api.chain_eval("data/2wiki", "reports/chain",
        ...                      encoders={"gold": "ckpt/gold", "on-policy": "ckpt/op"})
        >>> res["systems"]["chain (on-policy)"]["all"]["C@5"]
    """
    named = _named_encoders(encoders)
    ref = reference or (named[1][0] if len(named) > 1 else UNTRAINED)
    beams = list(beam_encoders) if beam_encoders is not None else [ref]
    _check_names([n for n, _ in named], [*beams, ref])
    if beam < 1:
        raise ConfigError("beam must be at least 1 (1: no beam baseline)")
    settings = eval_settings(named, max_seq_length, state)
    _check_common(steps, max_questions, settings.max_seq_length)
    refuse_existing(out, overwrite, "report folder")
    loaded = load(data, split, index, embedder=embedder, max_questions=max_questions,
                  progress=progress)
    total = steps or loaded.task.max_hops
    results = run_chain_eval(loaded, named, steps=total, beam=beam, beam_encoders=beams,
                             reference=ref, max_seq_length=settings.max_seq_length,
                             progress=progress, form=settings.form)
    config = {"data": str(data), "split": split, "embedder": embedder, "steps": total,
              "beam": beam, "encoders": {n: None if p is None else str(p) for n, p in named},
              "reference": ref, "n_questions": len(loaded.task.golds),
              "max_seq_length": settings.max_seq_length, "state": settings.form,
              "transfer": _transfer(named, loaded),   # trained against another corpus
              "device": str(loaded.embedder.model.device)}   # the latencies depend on it
    write_chain_report(out, config, results)
    return results


__all__ = ["DEFAULT_EMBEDDER", "REGIMES", "ChainSearchResult", "chain_eval", "chain_search",
           "chain_train"]
