"""Executors: where the model work of a corpus runs.

``local`` runs the model in this process through the content-addressed
:class:`~tttembed.embed.cache.CachedEmbedder`. ``ray`` sends the texts that are not in
the cache through a Ray Data ``map_batches`` stage with an actor pool (one model load per
actor, ``Ray.gpus`` per actor) and writes every batch that comes back into the same
embedding cache, in the driver, as it arrives: a rerun (or a run after a killed one) pays
only for what is not stored yet. Pair scoring works the same way through the reward
ledger (:func:`score_pairs`; :func:`use_executor` for the scorer of ``learn`` / ``eval``:
local-model scorers run on Ray, HTTP scorers stay in this process with a note). ``ray`` is
an optional extra (``pip install 'tttembed[ray]'``); this package imports without it.
Its settings travel as one :class:`~tttembed.execute.config.Ray` object.
"""

from tttembed.execute.config import Ray, resolve_executor
from tttembed.execute.embed import EmbedStats, embed_texts, embed_with
from tttembed.execute.score import RayScoring, prepare, ray_fallback, score_pairs, use_executor

__all__ = ["EmbedStats", "Ray", "RayScoring", "embed_texts", "embed_with", "prepare",
           "ray_fallback", "resolve_executor", "score_pairs", "use_executor"]
