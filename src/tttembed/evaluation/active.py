"""The active allocation in the evaluation protocols: its pairs (one adaptive sequence
over every task, judged through the same ``rewards_for`` as water-filling, nested in B),
and where its pairs went.

The TTT methods learned from these pairs are the rows ``<method>@active``; each has the
same B as its water-filling row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tttembed.adapt.active import active_sequence, uncertainty_order, where_pairs_went
from tttembed.adapt.allocate import Pair
from tttembed.evaluation.workload import TaskData
from tttembed.ttt.active import Graph, index_graph, judge_through, score_gaps
from tttembed.types import Rewards

SUFFIX = "@active"


def corpus_graph(work: Sequence[TaskData]
                 ) -> Callable[[Sequence[Pair]], Mapping[Pair, Sequence[str]]]:
    """``neighbours([(query_key, doc_id), ...])`` in each query's own task corpus, one
    batched search per task."""
    owner = {k: td for td in work for k in td.queries.keys}
    graphs: dict[str, Graph] = {}

    def neighbours(asked: Sequence[Pair]) -> Mapping[Pair, Sequence[str]]:
        by_task: dict[str, list[Pair]] = {}
        for q, d in asked:
            by_task.setdefault(owner[q].name, []).append((q, d))
        out: dict[Pair, Sequence[str]] = {}
        for name, pairs in by_task.items():
            td = owner[pairs[0][0]]
            near = graphs.setdefault(name, index_graph(td.index))(
                list(dict.fromkeys(d for _, d in pairs)))
            out.update(((q, d), near.get(d, ())) for q, d in pairs)
        return out
    return neighbours


def active_schedules(order: Sequence[tuple[int, str]], cands: Mapping[str, Sequence[str]],
                     grid: Sequence[int], rewards_for: Callable[[list], Rewards],
                     work: Sequence[TaskData]) -> list[list[Pair]]:
    """The active allocation's pair list at each budget of ``grid`` (water-filling's task
    balance, each task's least certain queries first), judged through ``rewards_for``
    round by round (the ledger pays each pair once)."""
    gaps: dict[str, float] = {}
    for td in work:
        gaps.update(score_gaps(td.queries.keys, td.base))
    return active_sequence(uncertainty_order(order, gaps), cands, grid,
                           judge_through(rewards_for), neighbours=corpus_graph(work))


def spending(schedules: Sequence[list[Pair]], grid: Sequence[int],
             cands: Mapping[str, Sequence[str]]) -> list[dict[str, int]]:
    """Where each budget's pairs went (queries touched; inside the base top 10, deeper in
    the base top 100, outside it), for results.json."""
    return [{"B": B, **where_pairs_went(p, cands)} for B, p in zip(grid, schedules)]
