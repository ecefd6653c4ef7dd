"""What an ``eval`` run will do and roughly what it costs, said before it starts: the grid
(budgets x scopes x methods x tasks x protocols x scorers) and the judge pairs it pays.

The pairs are estimated from what the protocols do: the fixed protocol's budgets are nested
(the largest budget's pairs hold every smaller one's), so a scorer pays at most the largest
budget ``max(b) * N`` pairs (``N`` the rewarded queries), capped by the candidates there
are (``min(EVAL_DEPTH, documents)`` per query); held-out rewards ``ceil(fraction * n_t)``
queries per task (every learning-only train query instead, for a task that has the
``--train-split``), LOTO every query, both at depth 10 (``--budget`` is the fixed protocol's
only, and the grid says so); a label scorer (``qrels``) pays nothing, and pairs the
reward ledger already holds are free (so the figure is an upper bound). Counting a task's
queries and documents reads its qrels and corpus lines only; a task that cannot be counted
here (``mteb:``) is shown without figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tttembed.adapt.allocate import BREADTH_DEPTH
from tttembed.evaluation.workload import EVAL_DEPTH


@dataclass(frozen=True)
class TaskSize:
    """A task's judged queries in the evaluated split and its documents (None: unknown);
    ``train``: its learning-only queries of ``--train-split`` (None: not asked, or the
    task has no such split, so held-out learns from a share of ``queries``)."""

    name: str
    queries: int | None
    documents: int | None
    train: int | None = None


def count_task(spec: str, data_root: str | Path | None, split: str,
               train_split: str | None = None) -> TaskSize:
    """``spec``'s judged queries and documents from its files' lines (None where they
    cannot be counted here: the real load reports any problem with its own message), and
    its learning-only ``train_split`` queries where it has that split (not in ``split``)."""
    from tttembed.data.beir import resolve_task_path
    from tttembed.evaluation.tasks import task_name

    name = task_name(spec)
    try:
        root = resolve_task_path(spec, data_root)
        qids = _qrels_ids(root / "qrels" / f"{split}.tsv")
        with (root / "corpus.jsonl").open("rb") as f:
            documents = sum(1 for line in f if line.strip())
        learn = root / "qrels" / f"{train_split}.tsv" if train_split else None
        train = len(_qrels_ids(learn) - qids) if learn is not None and learn.is_file() \
            else None
    except Exception:  # noqa: BLE001  (an estimate only; the load says what is wrong)
        return TaskSize(name, None, None)
    return TaskSize(name, len(qids), documents, train)


def _qrels_ids(path: Path) -> set[str]:
    with path.open(encoding="utf-8") as f:
        qids = {line.split("\t", 1)[0].strip() for line in f if line.strip()}
    return qids - {"query-id", "query_id", "qid"}


def rewarded_queries(protocol: str, sizes: Sequence[TaskSize], fraction: float) -> int | None:
    """Queries whose pairs ``protocol`` pays (None: a task could not be counted)."""
    if any(t.queries is None for t in sizes):
        return None
    if protocol == "heldout":
        return sum(t.train if t.train is not None else math.ceil(fraction * int(t.queries or 0))
                   for t in sizes)
    return sum(int(t.queries or 0) for t in sizes)


def protocol_pairs(protocol: str, budgets: Sequence[float], sizes: Sequence[TaskSize],
                   fraction: float) -> int | None:
    """At most this many pairs ``protocol`` pays one scorer: the fixed protocol its largest
    budget's (the smaller ones nested in it) within the candidates there are; held-out
    and LOTO learn at depth :data:`BREADTH_DEPTH` whatever ``--budget`` says."""
    n = rewarded_queries(protocol, sizes, fraction)
    if n is None or any(t.documents is None for t in sizes):
        return None
    docs = min(int(t.documents or 0) for t in sizes) if sizes else 0
    if protocol == "fixed":
        return min(max(1, round(max(budgets) * n)), n * min(EVAL_DEPTH, docs))
    return n * min(BREADTH_DEPTH, docs)


def judge_pairs(budgets: Sequence[float], protocols: Sequence[str], sizes: Sequence[TaskSize],
                fraction: float) -> int | None:
    """At most this many pairs for one (paying) scorer over ``protocols`` (module doc)."""
    got = [protocol_pairs(p, budgets, sizes, fraction) for p in protocols]
    return None if any(g is None for g in got) else sum(int(g or 0) for g in got)


#: Baselines that run at every budget on its rewarded pairs (the PRF ones need none).
BUDGETED_BASELINES = ("direct", "rw-rocchio", "qdrant-rf")


def methods_per_budget(scopes: Sequence[str], alphas: Sequence[str], selects: Sequence[str],
                       allocations: Sequence[str], baselines: Sequence[str],
                       protocol: str = "fixed") -> list[str]:
    """The method rows ``protocol`` learns or reranks at each budget (as the report names
    them): the fixed protocol every one asked; held-out the shared scopes and the auto
    choice (query-wise states, direct reranking and reward Rocchio equal raw on unseen
    queries, so it runs none of them, nor the active allocation); leave-one-task-out the
    global state."""
    def named(scope: str) -> list[str]:
        return [scope if a == "rule" else f"{scope}-auto" for a in alphas]

    if protocol == "loto":
        return named("global")
    if protocol == "heldout":
        return [m for s in scopes if s != "query" for m in named(s)] + list(selects)
    ttt = [m for s in scopes for m in named(s)] + list(selects)
    if "active" in allocations:
        ttt += [f"{m}@active" for m in ttt]
    return ttt + [b for b in baselines if b in BUDGETED_BASELINES]


def _methods_said(methods: Mapping[str, Sequence[str]]) -> str:
    """``3 methods per budget: task, direct, rw-rocchio``, or per protocol when they
    differ (``methods per budget: fixed: ...; heldout: task``)."""
    lists = list(methods.values())
    if all(m == lists[0] for m in lists):
        return f"{len(lists[0])} method{'s' * (len(lists[0]) != 1)} per budget: " + (
            ", ".join(lists[0]) or "none")
    return "methods per budget: " + "; ".join(
        f"{p}: {', '.join(m) or 'none'}" for p, m in methods.items())


def _number(x: float) -> str:
    return f"{x:g}"


def grid_lines(*, budgets: Sequence[float], budget_given: bool, scopes: Sequence[str],
               methods: Mapping[str, Sequence[str]], protocols: Sequence[str],
               sizes: Sequence[TaskSize], scorers: Mapping[str, bool],
               fraction: float) -> list[str]:
    """The lines ``eval`` prints before it starts; ``methods``: protocol -> the methods
    it runs per budget (:func:`methods_per_budget`); ``scorers``: spec -> whether it pays
    (False: it reads labels)."""
    b = sorted(budgets)
    whole = "" if budget_given else "; no --budget: the whole grid"
    tasks = ", ".join(f"{t.name}: {t.queries if t.queries is not None else '?'} queries"
                      for t in sizes)
    fixed = "fixed" in protocols
    cells = len(scorers) * sum((len(b) if p == "fixed" else 1) * len(methods.get(p, ()))
                               for p in protocols)
    span = _number(b[0]) if len(b) == 1 else f"{_number(b[0])} to {_number(b[-1])}"
    budget = (f"{len(b)} budget{'s' * (len(b) != 1)} ({span}{whole}"
              + ("; the fixed protocol's, the others learn at depth "
                 f"{BREADTH_DEPTH}" if len(protocols) > 1 else "") + ")" if fixed else
              f"depth {BREADTH_DEPTH} (--budget applies to the fixed protocol only)")
    lines = [f"grid: {budget} x {len(scopes)} scope{'s' * (len(scopes) != 1)} "
             f"({', '.join(scopes)}) x {len(sizes)} task{'s' * (len(sizes) != 1)} ({tasks}) "
             f"x {len(protocols)} protocol{'s' * (len(protocols) != 1)} "
             f"({', '.join(protocols)}) x {len(scorers)} scorer"
             f"{'s' * (len(scorers) != 1)}: {cells} learned cell{'s' * (cells != 1)} "
             f"({_methods_said({p: methods.get(p, ()) for p in protocols})})"]
    pairs = judge_pairs(b, protocols, sizes, fraction)
    cost = []
    for spec, pays in scorers.items():
        if not pays:
            cost.append(f"{spec}: free (labels)")
        else:
            cost.append(f"at most {pairs:,} for {spec}" if pairs is not None
                        else f"{spec}: unknown until the tasks are loaded")
    basis = ([f"the largest budget {_number(b[-1])} pairs per rewarded query, nested below "
              f"it, capped by {EVAL_DEPTH} candidates per query"] if fixed else [])
    basis += [f"{p}: {BREADTH_DEPTH} per rewarded query" for p in protocols if p != "fixed"]
    lines.append("judge pairs: " + "; ".join(cost) + f" (based on {'; '.join(basis)}; "
                 "pairs already in the reward ledger are free"
                 + ("; --budget picks fewer points)" if fixed else ")"))
    return lines


__all__ = ["BUDGETED_BASELINES", "TaskSize", "count_task", "grid_lines", "judge_pairs",
           "methods_per_budget", "protocol_pairs", "rewarded_queries"]
