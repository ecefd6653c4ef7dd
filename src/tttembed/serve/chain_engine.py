"""The chain route's engine (``tttembed serve --chain ENCODER``): the encoder in force,
and one persistent chain thread that merges concurrent ``/v1/chain/search`` requests into
batched chain searches, as the model thread merges embeddings requests.

ENCODER is ``base`` (the index's own model, untrained: it encodes a state exactly as the
frozen model does), a checkpoint folder (``tttembed chain train``'s), or a chain registry
(a folder or ``postgresql://`` URL: the version it serves, followed every registry poll;
``REGISTRY@vN`` pins one version). Each merged batch runs
:func:`tttembed.chain.online.chain_run`, the search ``tttembed chain search`` runs, so an
answer equals the offline one for the same question, index and encoder.

The chain thread encodes the untrained model's states on the model thread (one torch
thread team for the model, shared with ``/v1/embeddings``) and a checkpoint's with its own
model; every index search goes through the search thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.chain.forms import TEXT, StateSettings, check_form, form_passages, row_titles
from tttembed.chain.online import DEFAULT_STEPS, QuestionTexts, chain_run
from tttembed.chain.search import Encode
from tttembed.chain.setup import DEFAULT_MAX_SEQ_LENGTH
from tttembed.chain.states import TokenBudget
from tttembed.core.errors import ConfigError, StateMismatch, TTTEmbedError
from tttembed.index.base import Index
from tttembed.serve.engine import Engine
from tttembed.serve.worker import MergingWorker, Slot

log = logging.getLogger("tttembed.serve")
BASE = "base"


@dataclass(frozen=True, eq=False)
class ChainEncoder:
    """The encoder in force: what answers name it (``name``: ``base``, the checkpoint
    folder or the registry), its registry ``version`` (None outside a registry), its chain
    steps T, its ``encode`` and the states it reads."""

    name: str
    version: str | None
    steps: int
    encode: Encode
    #: the states it reads: its token limit and form (what it was trained with, unless
    #: ``--chain-max-seq-length`` / ``--chain-state`` say otherwise)
    settings: StateSettings = StateSettings(DEFAULT_MAX_SEQ_LENGTH, TEXT)


@dataclass(frozen=True)
class Ask:
    """One request's question and how many ranked passages it wants."""

    question: str
    top_k: int


@dataclass(frozen=True)
class Found:
    """One question's answer: the final ranking (rows, best first) and the chain (rows and
    the similarity each hop was picked with)."""

    ranking: list[int]
    hops: list[tuple[int, float]]


#: A merged call's key: the encoder, the steps T and the beam width.
ChainKey = tuple[ChainEncoder, int, int]


def registry_spec(spec: str) -> tuple[str, str | None] | None:
    """(registry, pinned version) when ``spec`` names a registry, else None."""
    from tttembed.registry.postgres import is_url

    root, sep, version = spec.rpartition("@")
    if not sep or not version.startswith("v"):
        root, version = spec, ""
    if is_url(root) or (Path(root) / "registry.json").is_file():
        return root, version or None
    return None


class ChainSource:
    """Where the encoder comes from, and the encoder in force (``current``), swapped whole
    when a followed registry serves another version."""

    def __init__(self, spec: str, index: Index, engine: Engine,
                 registry_cache: str | None = None, max_seq_length: int | None = None,
                 form: str | None = None) -> None:
        self.spec, self.index, self.engine = spec, index, engine
        #: what ``--chain-max-seq-length`` / ``--chain-state`` ask (None: each encoder's)
        self.max_seq_length, self.form = max_seq_length, form
        self.registry: Any = None
        self.pinned: str | None = None
        self.error: str | None = None
        self._base: ChainEncoder | None = None
        self._watching = threading.Event()
        self.replica: str | None = None
        self._coordination: Any = None
        found = registry_spec(spec)
        if found is not None:
            self._open(found, registry_cache)
        self.current = self._load(first=True)

    def _open(self, found: tuple[str, str | None], cache: str | None) -> None:
        from tttembed.registry.base import index_record
        from tttembed.registry.chain import is_chain
        from tttembed.registry.open import open_registry

        root, self.pinned = found
        self.registry = open_registry(root, cache=cache, offline_ok=True)
        if not is_chain(self.registry.manifest):
            raise ConfigError(f"--chain {self.spec}: {root} holds learned states, not chain "
                              "encoders: give it to --registry, and to --chain a chain "
                              "registry (`tttembed states add FOLDER CHECKPOINT`), a "
                              "checkpoint folder or base")
        self.registry.check_index(index_record(self.index))

    def base(self) -> ChainEncoder:
        """The untrained model: the index's own, encoding on the model thread."""
        if self._base is None:
            batcher = self.engine.encoder.batcher

            def encode(texts: list[str]) -> np.ndarray:
                return batcher.encode(list(texts), "query")

            from tttembed.chain.checkpoint import state_settings

            self._base = ChainEncoder(BASE, None, DEFAULT_STEPS, encode,
                                      state_settings(None, self.max_seq_length, self.form))
        return self._base

    def _load(self, first: bool = False) -> ChainEncoder:
        if self.registry is None:
            if self.spec == BASE:
                return self.base()
            return self._checkpoint(Path(self.spec), self.spec, None)
        from tttembed.registry.chain import FOLDER, is_chain

        v = self._version(first)
        if v is None:
            encoder = self.base()
        elif not is_chain(v.manifest):
            raise StateMismatch(f"version {v.name} of {self.registry.location} is not a "
                                "chain encoder")
        else:
            self.registry.validate(v.name)
            encoder = self._checkpoint(v.path / FOLDER, self.registry.location, v.name)
        if self.pinned is None:
            self.registry.remember_served(v)  # what a start while the database is down serves
        return encoder

    def _version(self, first: bool) -> Any:
        """The version to serve (None: the base encoder): the pinned one, or the one the
        registry serves; ``first`` (at start) while a database registry cannot be reached,
        the one this replica's cache served last, as a state replica does."""
        from tttembed.registry.open import cached_at_start
        from tttembed.registry.postgres import RegistryUnavailable

        if self.pinned is not None:
            return self.registry.get(self.pinned)
        try:
            name = self.registry.served()
            return None if name is None else self.registry.get(name)
        except RegistryUnavailable as exc:
            if not first:
                raise
            return cached_at_start(self.registry, exc)

    def _checkpoint(self, path: Path, name: str, version: str | None) -> ChainEncoder:
        from tttembed.chain.checkpoint import default_steps, load_encoder, state_settings

        if not path.is_dir():
            raise ConfigError(f"--chain {self.spec}: not base, a checkpoint folder or a "
                              "registry (no such folder); give --chain base, a folder "
                              "`tttembed chain train` wrote, or a chain registry")
        settings = state_settings(path, self.max_seq_length, self.form)
        encoder = load_encoder(path, max_seq_length=settings.max_seq_length, index=self.index)
        return ChainEncoder(name, version, default_steps(path), encoder.encode, settings)

    # -- following a registry ---------------------------------------------------------
    def watch(self, poll_s: float, replica: str | None = None) -> None:
        """Follow the registry's served version (a daemon thread), as the states do; with
        ``replica`` each poll reports what this replica serves (``states list`` shows
        it, as a state registry's replicas)."""
        if self.registry is None or self.pinned is not None or self._watching.is_set():
            return
        self.replica = replica
        self._watching.set()
        threading.Thread(target=self._watch, args=(poll_s,), name="tttembed-chain-registry",
                         daemon=True).start()

    def _watch(self, poll_s: float) -> None:
        mark: Any = None
        while self._watching.is_set():
            try:
                now = self.registry.mark()
                if now != mark:
                    fresh = self._load()
                    if fresh.version != self.current.version:
                        self.current = fresh
                        log.info("chain encoder: now serving %s", fresh.version or BASE)
                    mark = now
                self.error = None
            except Exception as exc:  # noqa: BLE001  (the watcher must never end)
                message = " ".join(f"{type(exc).__name__}: {exc}".split())
                if message != self.error:
                    log.error("chain encoder: cannot follow the registry (still serving "
                              "%s): %s", self.current.version or BASE, message)
                self.error = message
            self._report()
            self.registry.wait_change(poll_s)

    def _report(self) -> None:
        """Tell the registry what this replica serves; a registry that cannot be written
        is skipped quietly (the watcher says why it cannot follow)."""
        if self.replica is None:
            return
        try:
            if self._coordination is None:
                from tttembed.loop.coordination.open import open_coordination

                self._coordination = open_coordination(self.registry)
            self._coordination.report_replica(self.replica, {
                "version": self.current.version, "following": self.error is None,
                "error": self.error, "refused": None, "kind": "chain"})
        except (OSError, TTTEmbedError):
            pass

    def stop(self) -> None:
        self._watching.clear()

    def status(self) -> dict[str, Any]:
        """What ``/healthz`` says of the chain encoder: its name, version, T, the states
        it reads (``max_seq_length``, ``state``: the form), and the error that keeps a
        followed registry's version from being served (None: none)."""
        now = self.current
        return {"encoder": now.name, "version": now.version, "steps": now.steps,
                "max_seq_length": now.settings.max_seq_length, "state": now.settings.form,
                "error": self.error}


class ChainWorker(MergingWorker[list[Ask], ChainKey, list[Found]]):
    """Concurrent chain requests merged into one chain search per (encoder, T, beam)
    (the batching policy of :class:`~tttembed.serve.worker.MergingWorker`)."""

    def __init__(self, index: Index, engine: Engine, model: Any, passages: Sequence[str],
                 titles: Sequence[str], max_batch: int, max_wait_ms: float) -> None:
        super().__init__("tttembed-chain", max_batch, max_wait_ms)
        self.index, self.engine, self.model = index, engine, model
        self.passages, self.titles = passages, titles
        self._texts: dict[StateSettings, QuestionTexts] = {}

    def texts(self, settings: StateSettings) -> QuestionTexts:
        """The state texts of ``settings`` (built on first use: the chain thread's)."""
        found = self._texts.get(settings)
        if found is None:
            passages = form_passages(self.passages, self.titles, settings.form)
            found = self._texts[settings] = QuestionTexts(
                passages, TokenBudget.for_model(self.model, settings.max_seq_length))
        return found

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.engine.searcher.search(queries, min(int(k), len(self.index)))

    def answer(self, key: ChainKey, slots: list[Slot[list[Ask], ChainKey, list[Found]]]) -> None:
        encoder, steps, beam = key
        asks = [a for s in slots for a in s.payload]
        texts = self.texts(encoder.settings).of([a.question for a in asks])
        run = chain_run(len(asks), texts, encoder.encode,
                        self.search, steps=steps, beam=beam,
                        keep=max(a.top_k for a in asks))
        at = 0
        for s in slots:
            s.result = [_found(run, at + i, a.top_k) for i, a in enumerate(s.payload)]
            at += len(s.payload)


def _found(run: Any, i: int, top_k: int) -> Found:
    rows = [int(r) for r in run.ranking[i][:top_k] if r >= 0]
    hops = [(int(r), float(run.picked_scores[i][t])) for t, r in enumerate(run.picked[i])
            if r >= 0]
    return Found(rows, hops)


class ChainService:
    """The chain route's parts: the encoder's source, the worker, the passage texts."""

    def __init__(self, spec: str, index: Index, engine: Engine, corpus: str | None,
                 max_batch: int, max_wait_ms: float, registry_cache: str | None = None,
                 max_seq_length: int | None = None, form: str | None = None) -> None:
        from tttembed.data.beir import doc_text
        from tttembed.serve.documents import read_documents

        model = getattr(engine.embedder, "model", None)
        if model is None or not hasattr(model, "tokenizer"):
            raise ConfigError("--chain needs an index built with a sentence-transformers "
                              f"model (st:), this one's is {index.identity!r}")
        docs = read_documents(index, corpus)  # the read include shares
        passages = [doc_text(docs[d]) for d in index.doc_ids]
        if max_seq_length is not None and max_seq_length < 8:
            raise ConfigError("--chain-max-seq-length must be at least 8")
        if form is not None:
            check_form(form)
        self.source = ChainSource(spec, index, engine, registry_cache, max_seq_length, form)
        self.worker = ChainWorker(index, engine, model, passages,
                                  row_titles(docs, index.doc_ids), max_batch, max_wait_ms)


__all__ = ["BASE", "Ask", "ChainEncoder", "ChainService", "ChainSource", "ChainWorker",
           "Found", "registry_spec"]
