"""Cheaper chain states for ``bench_chain.py --json``: where a greedy chain's tokens go,
and the options tried against the 128-token state.

Each option's rule is fixed here, before any run; the one free constant (``ALPHAS``) is
chosen on the training split, never on the test split.

* ``text-N``: today's state text (``tttembed.chain.states``) cut to N tokens.
* ``title-sentence``: each picked passage reduced to its title and the one sentence that
  shares the most words with the question (ties: the earlier sentence), then today's
  state text at the 128-token limit. Fewer tokens re-read per hop.
* ``composed``: no text re-read after the first step: the state vector is the question's
  vector plus ``alpha`` times the last picked passage's index vector, renormalised;
  ``alpha`` of ``ALPHAS`` with the best C@5 on the training split's questions.
* ``entities``: each picked passage reduced to its capitalised words and four-digit
  numbers (names, places, titles, months, years), in order, without repeats, stop words or
  its own title's words, at most ``n`` of them; then today's state text at the 128-token
  limit. The bridge a next hop needs (a director, a spouse, a birthplace, a date) is
  mostly such a word; the rest of a passage is what the later states pay for. ``n`` is the
  largest of ``ENTITY_WORDS`` whose greedy chain encodes at most ``ENTITY_TOKENS`` x the
  tokens of T single searches on the training split's questions (a tokens rule, as the
  old limit rule, with 0.1 left for the time that is not encoding).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.chain.forms import STOP_WORDS, entity_words

#: The composed state's weights tried on the training split.
ALPHAS = (0.1, 0.25, 0.5)
#: The entity state's words per passage tried on the training split, and its tokens rule.
ENTITY_WORDS = (16, 12, 8, 6, 4, 3, 2)
ENTITY_TOKENS = 1.4
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def titles_and_texts(data: Path, doc_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(title, text) of every index row, read from the folder's corpus.jsonl."""
    want = set(doc_ids)
    found: dict[str, tuple[str, str]] = {}
    with open(data / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            if doc["_id"] in want:
                found[doc["_id"]] = (doc.get("title", ""), doc["text"])
    return [found[d] for d in doc_ids]


def entity_passages(docs: Sequence[tuple[str, str]], n: int) -> list[str]:
    """Every index row's passage as ``entity_words`` reduces it (question-independent, so
    built once per index, as the index itself is)."""
    return [entity_words(title, text, n) for title, text in docs]


def entity_texts(questions: Sequence[str], passages: Sequence[str], model: Any) -> Any:
    """State texts over entity passages, at the 128-token limit."""
    from tttembed.chain.states import StateTexts, TokenBudget

    return StateTexts(list(questions), passages, budget=TokenBudget.for_model(model, 128))


def choose_entity_words(train: Any, encode: Any, data: Path
                        ) -> tuple[int, dict[int, float]]:
    """The entity state's ``n``: the largest of ``ENTITY_WORDS`` whose greedy chain on the
    training split encodes at most ``ENTITY_TOKENS`` x the tokens of T single searches
    (the smallest when none does); with the tokens ratio of each."""
    from tttembed.chain.search import greedy_chain

    task, model = train.task, train.embedder.model
    docs = titles_and_texts(data, train.index.doc_ids)
    steps = task.max_hops
    single = count_tokens(model, task.questions) * steps
    ratio: dict[int, float] = {}
    seen: list[str] = []

    def counted(batch: list[str]) -> Any:
        seen.extend(batch)
        return encode(batch)
    for n in ENTITY_WORDS:
        seen.clear()
        greedy_chain(len(task.golds), entity_texts(task.questions, entity_passages(docs, n),
                                                   model), counted, train.index.search, steps)
        ratio[n] = round(count_tokens(model, seen) / single, 3)
        if ratio[n] <= ENTITY_TOKENS:
            return n, ratio
    return ENTITY_WORDS[-1], ratio


def count_tokens(model: Any, texts: Sequence[str]) -> int:
    """Tokens the model's tokenizer gives the texts, special tokens included."""
    tok = model.tokenizer
    return sum(len(i) for i in tok(list(texts), truncation=True, max_length=512)["input_ids"])


class TitleSentence:
    """State texts whose passages are each reduced to title + the sentence sharing most
    words with the question (the StateTexts protocol: call and ``texts``)."""

    def __init__(self, questions: Sequence[str], docs: Sequence[tuple[str, str]],
                 model: Any, max_seq_length: int = 128) -> None:
        from tttembed.chain.states import StateTexts, TokenBudget

        self.questions, self.docs = list(questions), docs
        self.words = [_words(q) for q in self.questions]
        self.inner = StateTexts(self.questions, _Short(self), budget=TokenBudget.for_model(
            model, max_seq_length))
        self.current = 0

    def short(self, row: int) -> str:
        title, text = self.docs[row]
        sentences = [s for s in _SENTENCE.split(text) if s.strip()] or [text]
        q = self.words[self.current]
        best = max(range(len(sentences)), key=lambda i: (len(_words(sentences[i]) & q), -i))
        return f"{title} {sentences[best]}".strip()

    def __call__(self, qi: int, hist: Sequence[int]) -> str:
        return self.texts([(qi, hist)])[0]

    def texts(self, states: Sequence[tuple[int, Sequence[int]]]) -> list[str]:
        out = []
        for qi, hist in states:
            self.current = int(qi)   # the passage's sentence depends on the question
            self.inner.forget_states()
            out.append(self.inner.text(qi, hist))
        return out


class _Short:
    """Passage texts as TitleSentence reduces them (for the question it is at)."""

    def __init__(self, owner: TitleSentence) -> None:
        self.owner = owner

    def __getitem__(self, row: int) -> str:
        return self.owner.short(int(row))

    def __len__(self) -> int:
        return len(self.owner.docs)


def composed_chain(questions_vectors: np.ndarray, passages: Any, search: Any, steps: int,
                   alpha: float, depth: int = 100, keep: int = 100) -> Any:
    """Greedy chain whose later states are composed from index vectors (no encoding):
    s_t = normalise(q + alpha * p_last). Returns ranking (n, L)."""
    from tttembed.chain.search import _flat, first_free, rankings

    n = len(questions_vectors)
    picked = np.full((n, steps), -1, np.int64)
    S = np.asarray(questions_vectors, np.float32)
    seen_ids, seen_sims = [], []
    for t in range(steps):
        sims, ids = search(np.ascontiguousarray(S, np.float32), depth + t)
        ids = np.asarray(ids, np.int64)
        has, first = first_free(ids, picked[:, :t])
        picks = np.where(has, ids[np.arange(n), first], -1)
        picked[:, t] = picks
        seen_ids.append(ids)
        seen_sims.append(np.asarray(sims, np.float32))
        S = questions_vectors + alpha * passages(np.maximum(picks, 0))
        S /= np.linalg.norm(S, axis=1, keepdims=True)
    owner, rows, sims = _flat([np.repeat(np.arange(n), i.shape[1]) for i in seen_ids],
                              [i.ravel() for i in seen_ids], [s.ravel() for s in seen_sims])
    return rankings(picked, owner, rows, sims, keep)[0]


def time_composed(loaded: Any, encode: Any, steps: int, alpha: float, repeats: int
                  ) -> tuple[float, Any]:
    """(median seconds, ranking) of the composed chain, the question encoded once."""
    vectors = loaded.index.get_vectors
    times, ranking = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        Q = encode(loaded.task.questions)
        ranking = composed_chain(Q, vectors, loaded.index.search, steps, alpha)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), ranking


def choose_alpha(train: Any, encode: Any) -> tuple[float, dict[float, float]]:
    """The composed state's alpha with the best C@5 on the training split (ties: the
    smaller)."""
    from tttembed.chain.search import chain_metrics

    Q = encode(train.task.questions)
    c5 = {a: chain_metrics(composed_chain(Q, train.index.get_vectors, train.index.search,
                                          train.task.max_hops, a),
                           train.task.golds)["all"]["C@5"] for a in ALPHAS}
    return max(ALPHAS, key=lambda a: (c5[a], -a)), c5


def token_split(tokenizer: Any, texts: Sequence[str], questions: Sequence[str],
                limit: int) -> dict[str, float]:
    """Mean tokens per state text (with the two special tokens): the question's, the
    separators', and the passages' (the rest)."""
    def count(batch: Sequence[str]) -> list[int]:
        return [len(i) for i in tokenizer(list(batch), truncation=True,
                                          max_length=limit)["input_ids"]]

    total, q = count(texts), count(questions)
    seps = [t.count(" [SEP] ") for t in texts]
    n = max(len(texts), 1)
    return {"state": sum(total) / n, "question": sum(q) / n, "separators": sum(seps) / n,
            "passages": (sum(total) - sum(q) - sum(seps)) / n}


__all__ = ["ALPHAS", "ENTITY_TOKENS", "ENTITY_WORDS", "TitleSentence", "choose_alpha",
           "choose_entity_words", "composed_chain", "count_tokens", "entity_passages",
           "entity_texts", "entity_words", "time_composed", "titles_and_texts",
           "token_split"]
