"""A scorer from its spec, with what its declared capabilities ask for (the corpus) and,
when its rewards are cacheable, wrapped in the paid-pair ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tttembed.core.errors import ConfigError
from tttembed.score.base import Scorer, capabilities
from tttembed.types import Corpus, PathLike


def build_scorer(spec: str, corpus: Corpus | None = None, *,
                 ledger_path: PathLike | None = None,
                 cache_dir: PathLike | None = None, use_ledger: bool = True,
                 **options: Any) -> Scorer:
    """A scorer from its spec, given the corpus when it needs it, wrapped in the ledger
    when its rewards are cacheable."""
    from tttembed.score.base import get_scorer
    from tttembed.score.ledger import Ledger, LedgerScorer, default_ledger_path

    caps = capabilities(spec)
    retry_missing = bool(options.pop("retry_missing", False))
    if caps.needs_corpus and "corpus" not in options:
        if corpus is None:
            raise ConfigError(f"scorer {spec!r} needs the document texts: give the corpus "
                              "(--corpus, or an index whose manifest names it)")
        options["corpus"] = corpus
    scorer = get_scorer(spec, **options)
    if not caps.cacheable or not use_ledger:
        if retry_missing:
            raise ConfigError(f"retry_missing (--retry-missing): scorer {spec!r} keeps no "
                              "ledger (its rewards are not cached), so no pair is recorded "
                              "missing")
        return scorer
    wrapped = LedgerScorer(scorer, Ledger(Path(ledger_path) if ledger_path else
                                          default_ledger_path(cache_dir)),
                           retry_missing=retry_missing)
    wrapped.origin = (spec, dict(options))  # to rebuild it elsewhere (Ray actors)
    return wrapped
