"""Retrieval states: the question plus the passages retrieved so far, as one query text.

State text format (what the query encoder reads)::

    QUESTION [SEP] PASSAGE_1 [SEP] PASSAGE_2 ... [SEP] PASSAGE_t

* the question comes first, then the history passages in the order they were retrieved
  (step order); each passage is ``doc_text(doc)`` (title, a space, text);
* the separator is ``" [SEP] "`` (``SEP``): BERT-family tokenizers read ``[SEP]`` as their
  own separator token, so one separator costs exactly one token;
* with no history the state text is the question alone (the single-shot query).

Truncation, when a token budget is given (the encoder's ``max_seq_length`` minus its two
special tokens, see ``TokenBudget``), is done here, not by the encoder, so that it is
deterministic and never drops the question:

1. the question is kept whole; only a question longer than the whole budget is cut (and
   then the state is that cut question alone);
2. the remaining budget, after one token per separator, is shared between the passages by
   water-filling: a passage shorter than its equal share keeps all its tokens, the
   leftover goes equally to the longer ones, each cut at a token boundary (its head is
   kept). Every history passage therefore keeps a piece of itself while the budget allows
   at least one token per passage; when it does not, the latest passages are dropped.

The functions here are pure: counting and cutting tokens are callables (``TokenBudget``
builds them from a Hugging Face tokenizer), so tests can use a whitespace tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

SEP = " [SEP] "

Count = Callable[[str], int]
Cut = Callable[[str, int], str]


def share_budget(lengths: Sequence[int], budget: int) -> list[int]:
    """Max-min fair split of ``budget`` tokens over items of the given lengths."""
    alloc = [0] * len(lengths)
    todo = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    left = max(int(budget), 0)
    for pos, i in enumerate(todo):
        share = left // (len(todo) - pos)
        alloc[i] = min(int(lengths[i]), share)
        left -= alloc[i]
    # hand out the remainder (integer division) to the cut passages, earliest first
    for i in sorted(range(len(lengths))):
        if left <= 0:
            break
        if alloc[i] < lengths[i]:
            alloc[i] += 1
            left -= 1
    return alloc


def format_state(question: str, passages: Sequence[str], *, sep: str = SEP,
                 budget: int | None = None, count: Count | None = None,
                 cut: Cut | None = None, sep_tokens: int = 1) -> str:
    """One state text (see the module docstring for the exact format and truncation)."""
    if budget is None:
        return sep.join([question, *passages])
    if count is None or cut is None:
        raise ValueError("a token budget needs count and cut callables")
    q_len = count(question)
    if q_len >= budget or not passages:
        return cut(question, budget) if q_len > budget else question
    passages = list(passages)
    while passages:
        room = budget - q_len - sep_tokens * len(passages)
        if room >= len(passages):
            break
        passages.pop()  # not even one token each: drop the latest passages
    if not passages:
        return question
    lengths = [count(p) for p in passages]
    alloc = share_budget(lengths, room)
    parts = [p if a >= n else cut(p, a) for p, n, a in zip(passages, lengths, alloc)]
    return sep.join([question, *parts])


@dataclass(frozen=True)
class TokenBudget:
    """Token counting and cutting with a Hugging Face fast tokenizer (no special tokens).

    ``budget`` is the number of content tokens a state may hold (max_seq_length - 2 for
    BERT-style encoders that add [CLS] and [SEP]).
    """

    tokenizer: Any
    budget: int

    @classmethod
    def for_model(cls, model: Any, max_seq_length: int | None = None) -> TokenBudget:
        """From a SentenceTransformer: its tokenizer and max_seq_length (or the given one)."""
        length = int(max_seq_length or model.max_seq_length)
        return cls(model.tokenizer, max(length - 2, 1))

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def ends(self, text: str) -> list[int]:
        """The character offset where each of the text's tokens ends."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [int(end) for _, end in enc["offset_mapping"]]

    def ends_many(self, texts: Sequence[str], chunk: int = 1024) -> list[list[int]]:
        """``ends`` of many texts, tokenised in batches (a fast tokenizer's batch call)."""
        out: list[list[int]] = []
        for start in range(0, len(texts), chunk):
            enc = self.tokenizer(list(texts[start:start + chunk]), add_special_tokens=False,
                                 return_offsets_mapping=True)
            out += [[int(end) for _, end in offs] for offs in enc["offset_mapping"]]
        return out

    def cut(self, text: str, n: int) -> str:
        """The head of ``text`` holding its first ``n`` tokens (cut at a character offset)."""
        if n <= 0:
            return ""
        ends = self.ends(text)
        return text if len(ends) <= n else text[:ends[n - 1]]


class StateTexts:
    """Builds state texts for a set of questions over a passage list (rows of the index).

    ``text(qi, history)`` (or calling the object) gives the state text of question ``qi``
    with the passages at rows ``history`` (step order); ``texts(states)`` gives many at
    once and tokenises the questions and passages it has not seen yet in one batch. Each
    distinct question or passage is tokenised once (its token end offsets are cached, so
    counting and cutting are lookups), and state texts are cached by state: chain steps,
    beams and training epochs that meet a state again reuse its text. The result is
    exactly ``format_state`` with the budget's ``count`` and ``cut``.
    """

    def __init__(self, questions: Sequence[str], passages: Sequence[str], *,
                 budget: TokenBudget | None = None, sep: str = SEP,
                 cache_size: int = 1_000_000,
                 offsets: dict[str, list[int]] | None = None) -> None:
        self.questions = list(questions)
        self.passages = passages
        self.budget = budget
        self.sep = sep
        self.cache_size = int(cache_size)
        #: token end offsets by text; ``offsets`` shares them with other instances (a
        #: server's batches of new questions over the same passages)
        self._ends: dict[str, list[int]] = {} if offsets is None else offsets
        self._texts: dict[tuple[int, tuple[int, ...]], str] = {}

    def _offsets(self, text: str) -> list[int]:
        ends = self._ends.get(text)
        if ends is None:
            assert self.budget is not None
            ends = self._ends[text] = self.budget.ends(text)
        return ends

    def _count(self, text: str) -> int:
        return len(self._offsets(text))

    def _cut(self, text: str, n: int) -> str:
        if n <= 0:
            return ""
        ends = self._offsets(text)
        return text if len(ends) <= n else text[:ends[n - 1]]

    def text(self, qi: int, history: Sequence[int]) -> str:
        key = (int(qi), tuple(int(r) for r in history))
        out = self._texts.get(key)
        if out is not None:
            return out
        passages = [self.passages[r] for r in key[1]]
        if self.budget is None:
            out = format_state(self.questions[qi], passages, sep=self.sep)
        else:
            out = format_state(self.questions[qi], passages, sep=self.sep,
                               budget=self.budget.budget, count=self._count, cut=self._cut)
        if len(self._texts) >= self.cache_size:
            self._texts.clear()
        self._texts[key] = out
        return out

    def __call__(self, qi: int, history: Sequence[int]) -> str:
        return self.text(qi, history)

    def prepare(self, rows: Sequence[int] | None = None) -> int:
        """Tokenise the questions and the passages at ``rows`` (default: every passage)
        ahead of time, in batches, as an index is built ahead of time; returns how many
        texts were tokenised. Later state texts then only look offsets up."""
        if self.budget is None:
            return 0
        pool = [*self.questions, *(self.passages[int(r)] for r in
                                   (range(len(self.passages)) if rows is None else rows))]
        todo = list(dict.fromkeys(t for t in pool if t not in self._ends))
        self._ends.update(zip(todo, self.budget.ends_many(todo)))
        return len(todo)

    def forget_states(self) -> None:
        """Drop the cached state texts (token offsets stay)."""
        self._texts.clear()

    def texts(self, states: Sequence[tuple[int, Sequence[int]]]) -> list[str]:
        if self.budget is not None:
            todo: dict[str, None] = {}
            for qi, hist in states:
                if (int(qi), tuple(int(r) for r in hist)) in self._texts:
                    continue
                for t in (self.questions[qi], *(self.passages[int(r)] for r in hist)):
                    if t not in self._ends:
                        todo[t] = None
            if todo:
                self._ends.update(zip(todo, self.budget.ends_many(list(todo))))
        return [self.text(qi, hist) for qi, hist in states]


def missing_gold(history: Sequence[int], gold: Sequence[int]) -> list[int]:
    """Gold rows not in the history, in chain order."""
    seen = set(int(h) for h in history)
    return [g for g in gold if g not in seen]


def n_wrong(history: Sequence[int], gold: Sequence[int]) -> int:
    """Number of history passages that are not gold."""
    golds = set(gold)
    return sum(1 for h in history if int(h) not in golds)


def gold_states(golds: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...]]]:
    """Gold-history states: question qi with its first j gold passages, j = 0..n-1."""
    return [(qi, tuple(int(x) for x in gold[:j]))
            for qi, gold in enumerate(golds) for j in range(len(gold))]


def reached_states(picked: np.ndarray | Sequence[Sequence[int]], golds: Sequence[Sequence[int]]
                   ) -> list[tuple[int, tuple[int, ...]]]:
    """States a chain run reached that still miss a gold passage, deduplicated, in order.

    ``picked`` is the (n, T) array of rows a run took. The states are the histories
    ``picked[qi, :t]`` for t = 1..T-1 (the states the encoder acted on after its first
    step; the empty history is the question alone, already a gold state).
    """
    out: list[tuple[int, tuple[int, ...]]] = []
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for qi, gold in enumerate(golds):
        row = [int(x) for x in picked[qi] if int(x) >= 0]
        for t in range(1, len(row)):
            hist = tuple(row[:t])
            if not missing_gold(hist, gold):
                continue
            key = (qi, hist)
            if key not in seen:
                seen.add(key)
                out.append(key)
    return out


__all__ = ["SEP", "StateTexts", "TokenBudget", "format_state", "gold_states", "missing_gold",
           "n_wrong", "reached_states", "share_budget"]
