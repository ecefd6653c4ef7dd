"""The chain benchmarks' timed encoder, state texts and search (``bench_chain.py`` and
``_chain_cost.py`` share them)."""

from __future__ import annotations

import time
from typing import Any


class Timed:
    """An encoder, state texts and a search, each timed (``phase``), the encode calls
    one by one (``calls``: step 1 is the first of a greedy run)."""

    def __init__(self, loaded: Any, encode: Any = None) -> None:
        from tttembed.chain.setup import frozen_encode

        self.loaded = loaded
        self.frozen = encode or frozen_encode(loaded.embedder)
        #: the encoder every option but one trained for its own states runs
        self.base = self.frozen
        self.phase = {"encode": 0.0, "texts": 0.0, "search": 0.0}
        self.calls: list[float] = []
        self.seen: list[str] | None = None
        self.texts: Any = None

    def reset(self, max_seq_length: int, prepared: bool = False) -> None:
        from tttembed.chain.setup import state_texts

        self.frozen = self.base
        self.texts = state_texts(self.loaded.task, self.loaded.embedder.model, max_seq_length)
        if prepared:
            self.texts.prepare()
        self.phase = dict.fromkeys(self.phase, 0.0)
        self.calls = []

    def encode(self, batch: list[str]) -> Any:
        if self.seen is not None:
            self.seen.extend(batch)
        t0 = time.perf_counter()
        out = self.frozen(batch)
        self.calls.append(time.perf_counter() - t0)
        self.phase["encode"] += self.calls[-1]
        return out

    def many(self, states: Any) -> list[str]:
        t0 = time.perf_counter()
        out = self.texts.texts(states)
        self.phase["texts"] += time.perf_counter() - t0
        return out

    def search(self, Q: Any, k: int) -> Any:
        t0 = time.perf_counter()
        out = self.loaded.index.search(Q, k)
        self.phase["search"] += time.perf_counter() - t0
        return out

    def tokens(self, texts: list[str], max_seq_length: int) -> int:
        tok = self.loaded.embedder.model.tokenizer
        return sum(len(ids) for ids in tok(texts, truncation=True,
                                           max_length=max_seq_length)["input_ids"])


class _Texts:
    """The StateTexts protocol (call and ``texts``) over a :class:`Timed`."""

    def __init__(self, timed: Timed) -> None:
        self.timed = timed

    def __call__(self, qi: int, hist: Any) -> str:
        return self.timed.many([(qi, hist)])[0]

    def texts(self, states: Any) -> list[str]:
        return self.timed.many(states)
