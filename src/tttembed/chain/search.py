"""Chain search (greedy and beam), the final ranking rule, and the chain metrics.

Pure numerical core: the query encoder is a callable ``encode(texts) -> (n, d)`` unit
vectors, the passage index a callable ``search(Q, k) -> (D, I)`` with FAISS's contract
(``IndexHandle.search`` fits), and state texts come from ``StateTexts.text(qi, history)``.

Greedy chain search, batched across questions: at step t (0-based) every question's state
(question + the t passages it has) is encoded in one call, the index is searched for the
top ``depth + t`` passages, and the best passage not already in the history is appended.

Final ranking (METHOD.md Part 2): the T passages in step order first, then every other
passage ordered by the best score it got at any step (ties: lower index row first).
Rows are index rows; ``-1`` marks "nothing" (a corpus smaller than the chain).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Encode = Callable[[list[str]], np.ndarray]
Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
TextOf = Callable[[int, Sequence[int]], str]


@dataclass(frozen=True)
class ChainRun:
    """What a chain search returns.

    picked: (n, T) rows taken at each step (-1: none left); picked_scores: their scores;
    ranking: (n, L) final ranking rows (-1 padded); ranking_scores: (n, L), the picked
    passages get +inf so that any consumer sorting by score keeps the rule;
    n_encoded: state texts encoded in total.
    """

    picked: np.ndarray
    picked_scores: np.ndarray
    ranking: np.ndarray
    ranking_scores: np.ndarray
    n_encoded: int


def next_picks(states: Sequence[tuple[int, Sequence[int]]], text_of: TextOf, encode: Encode,
               search: Search, depth: int = 100,
               exclude: Sequence[Sequence[int]] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One greedy step for many states at once.

    The pick skips the state's history and, when given, ``exclude[i]`` (rows already
    retrieved that the state text no longer shows). Returns (pick rows (n,), pick scores
    (n,), sims, ids): the raw search results (FAISS's D, I) of each state.
    """
    n = len(states)
    if n == 0:
        return (np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 0), np.float32),
                np.zeros((0, 0), np.int64))
    Q = encode([text_of(qi, hist) for qi, hist in states])
    skip = [set(int(h) for h in hist) | set(int(x) for x in (exclude[i] if exclude else ()))
            for i, (_, hist) in enumerate(states)]
    k = depth + max(len(x) for x in skip)
    sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), k)
    picks = np.full(n, -1, dtype=np.int64)
    scores = np.full(n, -np.inf, dtype=np.float32)
    for i, taken in enumerate(skip):
        for d, row in zip(sims[i], ids[i]):
            if row >= 0 and int(row) not in taken:
                picks[i], scores[i] = int(row), float(d)
                break
    return picks, scores, sims, np.asarray(ids, dtype=np.int64)


def _update_best(best: dict[int, float], sims: np.ndarray, ids: np.ndarray) -> None:
    for d, row in zip(sims, ids):
        r = int(row)
        if r >= 0 and (r not in best or d > best[r]):
            best[r] = float(d)


def final_ranking(picked: Sequence[int], best: dict[int, float], keep: int
                  ) -> tuple[list[int], list[float]]:
    """Picked rows in step order, then the others by best score (desc), row asc on ties."""
    head = [int(r) for r in picked if int(r) >= 0]
    head_set = set(head)
    rest = sorted((r for r in best if r not in head_set), key=lambda r: (-best[r], r))
    rows = (head + rest)[:max(keep, len(head))]
    scores = [float("inf")] * len(head) + [best[r] for r in rows[len(head):]]
    return rows, scores


def _pack(rows: list[list[int]], scores: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    width = max((len(r) for r in rows), default=0)
    R = np.full((len(rows), width), -1, dtype=np.int64)
    S = np.full((len(rows), width), -np.inf, dtype=np.float32)
    for i, (r, s) in enumerate(zip(rows, scores)):
        R[i, :len(r)] = r
        S[i, :len(s)] = s
    return R, S


def greedy_chain(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
                 steps: int, *, depth: int = 100, keep: int = 100,
                 progress: Callable[[int], None] | None = None) -> ChainRun:
    """Greedy chain search for ``steps`` steps over all questions (batched per step)."""
    picked = np.full((n_questions, steps), -1, dtype=np.int64)
    picked_scores = np.full((n_questions, steps), -np.inf, dtype=np.float32)
    best: list[dict[int, float]] = [{} for _ in range(n_questions)]
    for t in range(steps):
        states = [(qi, [int(x) for x in picked[qi, :t] if x >= 0])
                  for qi in range(n_questions)]
        picks, scores, sims, ids = next_picks(states, text_of, encode, search, depth)
        picked[:, t], picked_scores[:, t] = picks, scores
        for qi in range(n_questions):
            _update_best(best[qi], sims[qi], ids[qi])
        if progress is not None:
            progress(1)
    rows, scores_ = zip(*(final_ranking(picked[qi], best[qi], keep)
                          for qi in range(n_questions))) if n_questions else ((), ())
    R, S = _pack(list(rows), list(scores_))
    return ChainRun(picked, picked_scores, R, S, n_questions * steps)


def beam_chain(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
               steps: int, *, width: int = 4, depth: int = 100, keep: int = 100,
               progress: Callable[[int], None] | None = None) -> ChainRun:
    """Beam search of width W: each beam expands to its W best new passages, the W best
    histories by summed score survive; the best final beam is the chain. The ranking's
    tail uses the best score each passage got in any state encoded for the question.
    With W = 1 this is greedy search. Encodes n * (1 + W * (T - 1)) states at most."""
    beams: list[list[tuple[tuple[int, ...], float]]] = [[((), 0.0)] for _ in range(n_questions)]
    best: list[dict[int, float]] = [{} for _ in range(n_questions)]
    encoded = 0
    for _ in range(steps):
        flat = [(qi, hist) for qi in range(n_questions) for hist, _ in beams[qi]]
        owners = [(qi, b) for qi in range(n_questions) for b in range(len(beams[qi]))]
        Q = encode([text_of(qi, hist) for qi, hist in flat])
        encoded += len(flat)
        k = depth + max((len(h) for _, h in flat), default=0)
        sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), k)
        cands: list[list[tuple[tuple[int, ...], float]]] = [[] for _ in range(n_questions)]
        for i, (qi, b) in enumerate(owners):
            _update_best(best[qi], sims[i], ids[i])
            hist, total = beams[qi][b]
            taken = set(hist)
            n_new = 0
            for d, row in zip(sims[i], ids[i]):
                r = int(row)
                if r >= 0 and r not in taken:
                    cands[qi].append(((*hist, r), total + float(d)))
                    n_new += 1
                    if n_new == width:
                        break
        for qi in range(n_questions):
            seen: set[tuple[int, ...]] = set()
            uniq = []
            for hist, total in sorted(cands[qi], key=lambda c: (-c[1], c[0])):
                if hist not in seen:
                    seen.add(hist)
                    uniq.append((hist, total))
            if uniq:
                beams[qi] = uniq[:width]
        if progress is not None:
            progress(1)
    picked = np.full((n_questions, steps), -1, dtype=np.int64)
    picked_scores = np.full((n_questions, steps), -np.inf, dtype=np.float32)
    rows_all, scores_all = [], []
    for qi in range(n_questions):
        hist, _ = beams[qi][0]
        picked[qi, :len(hist)] = hist
        picked_scores[qi, :len(hist)] = [best[qi].get(r, -np.inf) for r in hist]
        rows, scores = final_ranking(hist, best[qi], keep)
        rows_all.append(rows)
        scores_all.append(scores)
    R, S = _pack(rows_all, scores_all)
    return ChainRun(picked, picked_scores, R, S, encoded)


def single_shot(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
                *, keep: int = 100) -> ChainRun:
    """The baseline: one search with the question alone; its top ``keep`` is the ranking."""
    Q = encode([text_of(qi, ()) for qi in range(n_questions)])
    sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), keep)
    ids = np.asarray(ids, dtype=np.int64)
    return ChainRun(ids[:, :1].copy(), np.asarray(sims[:, :1], np.float32), ids,
                    np.asarray(sims, np.float32), n_questions)


# ---------------------------------------------------------------- metrics (pure)

def complete_at_k(ranking: np.ndarray, golds: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """C@k per question: 1.0 when every gold row is in the top k of the ranking."""
    return np.array([float(set(g) <= set(ranking[i, :k].tolist()))
                     for i, g in enumerate(golds)], dtype=np.float64)


def recall_at_k(ranking: np.ndarray, golds: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Share of a question's gold rows in the top k of the ranking."""
    return np.array([len(set(g) & set(ranking[i, :k].tolist())) / len(set(g))
                     for i, g in enumerate(golds)], dtype=np.float64)


def chain_metrics(ranking: np.ndarray, golds: Sequence[Sequence[int]],
                  ks: Sequence[int] = (5, 10), recall_ks: Sequence[int] = (5, 10, 20)
                  ) -> dict[str, object]:
    """C@k and recall@k (in %), overall and by hop count: {"all": {...}, "by_hops": {h: ...}}."""
    cols = {f"C@{k}": complete_at_k(ranking, golds, k) for k in ks}
    cols.update({f"recall@{k}": recall_at_k(ranking, golds, k) for k in recall_ks})
    hops = np.array([len(g) for g in golds])

    def summary(mask: np.ndarray) -> dict[str, float]:
        out = {name: round(100.0 * float(v[mask].mean()), 2) if mask.any() else float("nan")
               for name, v in cols.items()}
        out["n"] = int(mask.sum())
        return out

    return {"all": summary(np.ones(len(golds), dtype=bool)),
            "by_hops": {int(h): summary(hops == h) for h in sorted(set(hops.tolist()))}}


__all__ = ["ChainRun", "beam_chain", "chain_metrics", "complete_at_k", "final_ranking",
           "greedy_chain", "next_picks", "recall_at_k", "single_shot"]
