"""Chain retriever for multi-hop retrieval with on-policy state training (METHOD.md Part 2).

Modules: ``api`` (the public API: ``chain_search``, ``chain_train``, ``chain_eval``),
``states`` (state text format, gold/reached states), ``search`` (greedy and beam chain
search, final ranking, C@k / recall@k), ``regimes`` (training states, negatives, InfoNCE),
``encoder`` (LoRA query encoder), ``train`` (training loop, checkpoints), ``analysis``
(mismatch, recovery, deletion), ``setup`` (data, frozen passage index, state texts),
``report`` (the report folder: results.json, report.md, PNG plots). Importing this package
does not import torch.
"""

from __future__ import annotations

from tttembed.chain.search import (
    ChainRun,
    beam_chain,
    chain_metrics,
    chain_recall_at_k,
    complete_at_k,
    greedy_chain,
    single_shot,
)
from tttembed.chain.states import SEP, StateTexts, TokenBudget, format_state

__all__ = ["SEP", "ChainRun", "StateTexts", "TokenBudget", "beam_chain", "chain_metrics",
           "complete_at_k", "format_state", "greedy_chain", "chain_recall_at_k", "single_shot"]
