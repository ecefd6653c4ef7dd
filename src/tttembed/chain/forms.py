"""The chain's state forms: what of each passage a state re-reads after the question.

* ``text`` (a trained encoder's): the passage's title and text, the whole state cut to
  its token limit (:mod:`tttembed.chain.states`).
* ``entities`` (the untrained encoder's default): the passage reduced to at most
  ``ENTITY_WORDS`` of its capitalised words and four-digit numbers (names, places,
  titles, months, years), in order, each once, without stop words or its own title's
  words. Measured with the untrained encoder as good as or better than ``text`` at about
  a third of its cost on 2WikiMultihopQA, HotpotQA and a third multi-hop set
  (docs/performance.md); an encoder trained on text states loses with it, so a
  checkpoint records the form it was trained on (text unless trained otherwise) and
  every reader uses that record.

Pure: no model, no I/O. A form changes the passages a state holds, nothing else: every
form builds its states with the same :class:`~tttembed.chain.states.StateTexts`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tttembed.core.errors import ConfigError

#: The state token limit of an encoder that records none it was trained with (the
#: untrained encoder): 128, measured as good as or better than 256 at about half the cost
#: (docs/performance.md). A checkpoint records its own (``max_seq_length`` in its config).
DEFAULT_MAX_SEQ_LENGTH = 128
TEXT, ENTITIES = "text", "entities"
FORMS = (TEXT, ENTITIES)
#: The untrained encoder's form: measured best with it on every multi-hop set tried.
UNTRAINED_FORM = ENTITIES
#: The entity state's words a passage: the rule of ``benchmarks/_chain_options.py`` chose
#: 3 on 2WikiMultihopQA's training split (the largest n whose chain encodes at most 1.4x
#: the tokens of T single searches), fixed before any test run.
ENTITY_WORDS = 3

_CAPITAL = re.compile(r"\b(?:[A-Z][\w'\-]*|\d{4})\b")
_TITLE_WORD = re.compile(r"[\w'\-]+")
STOP_WORDS = frozenset("a an and are as at be by did does for from had has have he her his in "
                  "is it its of on or she that the their this to was were what when where "
                  "which who whom whose why with".split())


@dataclass(frozen=True)
class StateSettings:
    """The states an encoder reads: their token limit and their form."""

    max_seq_length: int
    form: str


def check_form(form: str, option: str = "--chain-state") -> str:
    """``form`` when it is one of ``FORMS``; a ConfigError naming ``option`` otherwise."""
    if form not in FORMS:
        raise ConfigError(f"{option} {form!r}: not a state form; choose "
                          f"{' or '.join(FORMS)}")
    return form


def entity_words(title: str, text: str, n: int = ENTITY_WORDS) -> str:
    """A passage reduced to at most ``n`` of its capitalised words and four-digit numbers
    (in order, each once, no stop words, none of its title's words)."""
    skip = set(_TITLE_WORD.findall(title))
    out: list[str] = []
    for word in _CAPITAL.findall(text):
        if word in skip or word.lower() in STOP_WORDS or word in out:
            continue
        out.append(word)
        if len(out) >= n:
            break
    return " ".join(out)


def row_titles(corpus: Mapping[str, Mapping[str, str]], doc_ids: Sequence[str]
               ) -> list[str]:
    """The title of each index row (``doc_ids``' documents in ``corpus``; "" for none):
    what the entity form leaves out of its passage."""
    return [corpus[d].get("title", "") for d in doc_ids]


def form_passages(passages: Sequence[str], titles: Sequence[str], form: str,
                  n: int = ENTITY_WORDS) -> Sequence[str]:
    """The passages (index rows, each its title and text joined) a state of ``form``
    re-reads. ``titles[i]`` is row i's title: the entity form leaves its words out (a
    passage's text begins with its title, whose words are skipped either way)."""
    if check_form(form) == TEXT:
        return passages
    if len(titles) != len(passages):
        raise ConfigError(f"the entity state needs every passage's title: {len(titles)} "
                          f"titles for {len(passages)} passages")
    return [entity_words(t, p, n) for t, p in zip(titles, passages)]


__all__ = ["DEFAULT_MAX_SEQ_LENGTH", "ENTITIES", "ENTITY_WORDS", "FORMS", "STOP_WORDS", "TEXT",
           "UNTRAINED_FORM", "StateSettings", "check_form", "entity_words", "row_titles",
           "form_passages"]
