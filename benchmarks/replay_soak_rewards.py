"""Replay a soak's rewards through method auto and the two-population check, offline, in
minutes instead of a soak (issue 62: why held-back questions gained nothing; and why
ArguAna's held-back questions got worse).

    python benchmarks/replay_soak_rewards.py [--data ../shared/data/scifact]
        [--index ~/.cache/tttembed-bench/index-scifact-all] [--searches 25000]
        [--rewards clicks|labels] [--validate floor|judge] [--cap 50] [--texts N]
        [--floor tail-mean|pooled] [--keep-own]

``--data`` is any BEIR folder with train and test judgments (SciFact's, or ArguAna's
split by ``split_by_text.py``); its folder name is the task's.

Traffic as ``bench_soak.py`` draws it (Zipf(1) over the train questions in
``write_lua_data``'s seeded order); each distinct text's raw top 10 rewarded either by
its labels (``labels``: one scale) or as the loop's click feed would (``clicks``:
soak.lua's model, 30% of searches clicked, examined at rank r with probability 1/r,
clicked 0.7 if relevant else 0.05; the estimate (clicks + 5 x task mean) / (exposure +
5)), plus the top document of 2% of searches labelled 0/1. The judge pays labels.
``--validate floor`` values the documents the shared parts' held-out lists and the new
check bring in at the unseen floor (the loop's rule with a judge and clicks), ``judge``
pays the judge for them (the rule before). ``--floor``: the unseen floor as the loop
computes it (``tail-mean``: the mean shrunk reward of the pairs at ranks 8-10) or as
their pooled rate (``pooled``: their clicks / their exposure, no shrinkage; a
diagnostic). A question's own document (a corpus document whose text is the
question's: ArguAna's questions are corpus arguments) is not learned from, as the loop
does (:func:`tttembed.loop.rewarded.without_own`); ``--keep-own`` learns from it (the
rule before). Prints the rewards by kind of document, the guard's task evidence, the two
checks, the new check's lists judged by the labels instead, and the test questions'
nDCG@10 as the registered version serves them (paired sign-flip p).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _soak_setup import prepare_task  # noqa: E402
from _support import DATA  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA / "scifact"), help="a BEIR folder with train and test judgments (SciFact's, or "
                         "split_by_text.py's); its name is the task's")
    ap.add_argument("--index", default="~/.cache/tttembed-bench/index-scifact-all",
                    help="its index (bench_soak.py builds it once there)")
    ap.add_argument("--searches", type=int, default=25000, help="searches drawn (Zipf)")
    ap.add_argument("--rewards", choices=("clicks", "labels"), default="clicks",
                    help="how the shown documents are rewarded")
    ap.add_argument("--validate", choices=("floor", "judge"), default="floor",
                    help="what values the documents the shared parts bring in")
    ap.add_argument("--cap", type=int, default=50, help="method auto's validation cap")
    ap.add_argument("--seed", type=int, default=0, help="the traffic's seed")
    ap.add_argument("--texts", type=int, default=0,
                    help="learn from the N most asked texts only (0: every asked text; the "
                         "live loop's first cycles hold a few dozen)")
    ap.add_argument("--floor", choices=("tail-mean", "pooled"), default="tail-mean",
                    help="how the unseen floor is computed (module docstring)")
    ap.add_argument("--keep-own", action="store_true",
                    help="learn from each question's own document too (the rule before)")
    args = ap.parse_args(argv)
    from tttembed.adapt.validate import sign_flip_p
    from tttembed.index.embedder import index_embedder
    from tttembed.index.store import load_index
    from tttembed.loop.nojudge import FloorOrPay
    from tttembed.loop.populations import check_two, decide, oof_shared
    from tttembed.ttt.distil import learn_auto
    from tttembed.ttt.queries import QuerySet, base_retrieval

    index_path = Path(args.index).expanduser()
    for what, path in (("--data", Path(args.data) / "qrels" / "train.tsv"),
                       ("--index", index_path)):
        if not path.exists():
            print(f"error: {what}: {path} not found (give a BEIR folder with train judgments "
                  "and its index: bench_soak.py builds it once into ~/.cache/tttembed-bench)",
                  file=sys.stderr)
            return 2
    task = prepare_task(Path(args.data), 0, Path("/tmp/replay-soak"), index_path)
    name = task.name
    index = load_index(index_path)
    emb = index_embedder(index, None)
    asked = asked_texts(task, args.seed, args.searches)
    if args.texts:
        asked = sorted(asked, key=lambda a: -a[1])[:args.texts]

    def qset(qids: list[str]) -> QuerySet:
        return query_set(name, task.questions, qids)

    qs = qset([q for q, _ in asked])
    of = dict(zip(qs.keys, [q for q, _ in asked]))
    base = base_retrieval(index, emb, qs, 100)

    def rel(key: str, d: str) -> float:
        return float(task.qrels.get(of[key], {}).get(d, 0) > 0)

    rewards, floor = _rewards(args.rewards, qs.keys, [n for _, n in asked], base.rows,
                              index.doc_ids, rel, np.random.default_rng(args.seed + 2),
                              pooled=args.floor == "pooled")
    if not args.keep_own:
        rewards = _without_own(rewards, qs, task.folder / "corpus.jsonl")
    print(_by_kind(rewards, of, rel))

    def pay(pairs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for k, d in pairs:
            out.setdefault(k, {})[d] = rel(k, d)
        return out

    fp = FloorOrPay({k: floor for k in qs.keys}, pay) if args.validate == "floor" else None
    state = learn_auto([(qs, base, index)], rewards, pay, validate_cap=args.cap,
                       scopes=("query", "task"), seed=0, shared_pay=fp)
    assert state is not None
    sel = state.selection or {}
    ev = sel["evidence"][name].get("task", {})
    print(f"{len(qs)} texts, {sum(map(len, rewards.values()))} rewarded pairs, floor "
          f"{floor:.4f}; choice {sel['choice'][name]}; the guard's task part "
          f"{ev.get('gain', 0):+.4f} [{ev.get('ci_low', 0):+.4f}, {ev.get('ci_high', 0):+.4f}]")
    new_x = oof_shared(index, qs, base, rewards, state, seed=0)
    kept, two = check_two(index, qs, base.x, rewards, [], state, new_x, pay,
                          cap=lambda: args.cap, new_pay=fp, new_cap=10**9 if fp else None)
    print(decide(two, frozen=False, candidate=[kept] if kept is not None else [])[1])
    held = [of[k] for k in qs.keys]
    served, oof = (_label_ndcg(task, held, index, v) for v in (base.x, new_x))
    print(f"the new check's lists by the labels: the rewarded texts' nDCG@10 raw "
          f"{served.mean():.4f}, held out by text {oof.mean():.4f} "
          f"({oof.mean() - served.mean():+.4f})")
    test = [q for q in task.test if q in task.questions]
    raw, end = _test_ndcg(task, test, qset(test), index, emb, kept)
    p = sign_flip_p(end - raw, np.array([name] * len(raw)), 10000, np.random.default_rng(0))
    print(f"test questions ({len(test)}): raw {raw.mean():.4f}, the registered version "
          f"{end.mean():.4f} ({end.mean() - raw.mean():+.4f}, paired p {p:.3f})")
    return 0


def asked_texts(task, seed: int, searches: int) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """The traffic as ``bench_soak.py`` draws it: ``searches`` Zipf(1) draws over the
    stream questions in ``seed``'s shuffled order; each distinct text once, (question id,
    times asked), in order of first asking."""
    order = list(task.stream)
    random.Random(seed).shuffle(order)
    w = 1.0 / np.arange(1, len(order) + 1)
    rng = np.random.default_rng(seed + 1)
    counts = np.bincount(rng.choice(len(order), size=searches, p=w / w.sum()),
                         minlength=len(order))
    asked, seen = [], set()
    for q, n in zip(order, counts):
        if n and task.questions[q] not in seen:
            seen.add(task.questions[q])
            asked.append((q, int(n)))
    return asked


def query_set(name: str, questions: dict[str, str], qids: list[str]) -> Any:
    """The query set of ``qids`` under task ``name``, keyed by their texts' digests."""
    from tttembed.adapt.scopes import query_digest
    from tttembed.ttt.queries import QuerySet

    return QuerySet((name,) * len(qids), tuple(query_digest(questions[q]) for q in qids),
                    tuple(questions[q] for q in qids))


def _without_own(rewards, qs, corpus):  # type: ignore[no-untyped-def]
    """The loop's rule (module docstring) on rewards keyed by query key."""
    from tttembed.loop.rewarded import without_own

    docs = {}
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            docs[row["_id"]] = {"title": row.get("title", ""), "text": row.get("text", "")}
    by_text = {(t, x): dict(rewards[k]) for k, t, x in zip(qs.keys, qs.tasks, qs.texts)
               if k in rewards}
    kept = without_own(by_text, docs)
    return {k: kept[(t, x)] for k, t, x in zip(qs.keys, qs.tasks, qs.texts) if (t, x) in kept}


def _by_kind(rewards, of, rel):  # type: ignore[no-untyped-def]
    """The mean reward of the questions' own documents, the relevant ones and the rest."""
    kinds: dict[str, list[float]] = {"own document": [], "relevant": [], "other": []}
    for k, r in rewards.items():
        for d, v in r.items():
            kinds["own document" if d == of[k] else "relevant" if rel(k, d) else
                  "other"].append(v)
    return "rewards by kind: " + ", ".join(
        f"{n} {np.mean(v) if v else float('nan'):.4f} ({len(v)} pairs)" for n, v in kinds.items())


def _rewards(kind, keys, counts, rows, ids, rel, rng, *, pooled=False
             ):  # type: ignore[no-untyped-def]
    """The rewards of every text's raw top 10 (module docstring) and the unseen floor."""
    theta = 1.0 / np.arange(1, 11)
    tops = [[ids[r] for r in row[:10]] for row in rows]
    if kind == "labels":
        return {k: {d: rel(k, d) for d in top} for k, top in zip(keys, tops)}, 0.0
    got = []
    for k, n, top in zip(keys, counts, tops):
        att = np.array([0.7 if rel(k, d) else 0.05 for d in top])
        got.append(rng.binomial(rng.binomial(n, 0.3), att * theta) * 1.0)
    expo = [n * theta for n in counts]
    mean = sum(c.sum() for c in got) / sum(e.sum() for e in expo)
    out = {k: {d: float(np.clip((c + 5 * mean) / (e + 5), 0, 1)) for d, c, e in zip(top, cs, es)}
           for k, top, cs, es in zip(keys, tops, got, expo)}
    floor = float(sum(c[7:].sum() for c in got) / sum(e[7:].sum() for e in expo)) if pooled \
        else float(np.mean([v for r in out.values() for v in list(r.values())[7:]]))
    for i, (k, n) in enumerate(zip(keys, counts)):
        if rng.random() < 1 - 0.98 ** n:
            out[k][tops[i][0]] = rel(k, tops[i][0])
    return out, floor


def _test_ndcg(task, test, qs, index, emb, state):  # type: ignore[no-untyped-def]
    from tttembed.loop.promote import adapted
    from tttembed.ttt.queries import base_retrieval

    x = base_retrieval(index, emb, qs, 100).x
    return tuple(_label_ndcg(task, test, index, adapted(x, qs.texts, qs.tasks, states))
                 for states in ([], [state] if state is not None else []))


def _label_ndcg(task, qids, index, x):  # type: ignore[no-untyped-def]
    """nDCG@10 by the labels of each of ``qids`` searched with its row of ``x``."""
    from tttembed.metrics.ranking import per_query_metric
    from tttembed.ttt.judged import top_lists

    run = {q: {d: 10.0 - j for j, d in enumerate(lst)}
           for q, lst in zip(qids, top_lists(index, x))}
    per = per_query_metric({q: task.qrels[q] for q in qids}, run, "ndcg@10")
    return np.array([per.get(q, 0.0) for q in qids])


if __name__ == "__main__":
    sys.exit(main())
