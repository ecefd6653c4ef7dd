"""Silent faults of issue 49, section 5 (states and inputs): a stale or garbage
candidate, a diff across kinds of state, a NaN in the evaluation cache, a qrels file
linked to itself, and a rank above the embedder's dimension. Each is now said in one
line that names the thing and the fix."""

from __future__ import annotations

import re

import pytest

from tttembed.core.errors import ConfigError


def test_a_rank_above_the_embedders_dimension_is_refused_before_any_pair_is_paid(tmp_path):
    """``--rank 1000`` on a 16-dimension embedder is refused (one rule: rank <= the
    embedder's dimension), naming both numbers, before the judge is asked anything."""
    from tests.ttt.test_guard import D, _task
    from tttembed.score.qrels import QrelsScorer
    import tttembed.api as tt

    index, emb, docs, queries, qrels = _task(tmp_path, "helpful")
    asked: list[int] = []

    class Counting(QrelsScorer):
        def score(self, query, docs):  # type: ignore[override]
            asked.append(len(docs))
            return super().score(query, docs)

    with pytest.raises(ConfigError, match=re.escape(f"--rank 1000 is above the embedder's "
                                                    f"dimension {D}")):
        tt.learn(index, queries, scorer=Counting("labels", qrels=qrels), task="t",
                 embedder=emb, corpus=docs, budget=3, scope="adapter", rank=1000)
    assert asked == []
    state = tt.learn(index, queries, scorer=QrelsScorer("labels", qrels=qrels), task="t",
                     embedder=emb, corpus=docs, budget=3, scope="adapter", rank=D)
    assert state.parts.rank == D  # the dimension itself is allowed
