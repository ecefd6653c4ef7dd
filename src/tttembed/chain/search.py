"""Chain search (greedy and beam), the final ranking rule, and the chain metrics.

Pure numerical core: the query encoder is a callable ``encode(texts) -> (n, d)`` unit
vectors, the passage index a callable ``search(Q, k) -> (D, I)`` with FAISS's contract
(``IndexHandle.search`` fits), and state texts come from a callable ``text_of(qi,
history)``; when it also has a ``texts(states)`` method (``StateTexts`` does) each step's
texts are built in one batched call.

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

from tttembed.core.progress import Advance
from tttembed.types import Search

Encode = Callable[[list[str]], np.ndarray]
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


def state_texts_of(text_of: TextOf, states: Sequence[tuple[int, Sequence[int]]]
                   ) -> list[str]:
    """The texts of many states: ``text_of.texts(states)`` when offered, else one by one."""
    many = getattr(text_of, "texts", None)
    if callable(many):
        return list(many(states))
    return [text_of(qi, hist) for qi, hist in states]


def _pad(rows: Sequence[Sequence[int]]) -> np.ndarray:
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def first_free(ids: np.ndarray, taken: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``ids`` (n, k): whether some entry is a real row (>= 0) not in ``taken``
    (n, m; -1 padded), and the position of the first such entry (vectorised)."""
    free = ids >= 0
    if taken.shape[1]:
        free &= ~(ids[:, :, None] == taken[:, None, :]).any(axis=2)
    return np.asarray(free.any(axis=1)), np.asarray(free.argmax(axis=1))


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
    Q = encode(state_texts_of(text_of, states))
    skip = _pad([[*hist, *(exclude[i] if exclude else ())]
                 for i, (_, hist) in enumerate(states)])
    k = depth + int((skip >= 0).sum(axis=1).max(initial=0))
    sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), k)
    sims = np.asarray(sims, dtype=np.float32)
    ids = np.asarray(ids, dtype=np.int64)
    has, first = first_free(ids, skip)
    rows = np.arange(n)
    picks = np.where(has, ids[rows, first], -1).astype(np.int64)
    scores = np.where(has, sims[rows, first], -np.inf).astype(np.float32)
    return picks, scores, sims, ids


def best_scores(owner: np.ndarray, rows: np.ndarray, sims: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best score each (question, row) pair got: flat (owner, row, sim) triples in,
    unique (owner, row, best) out, sorted by owner then row. Rows < 0 are ignored."""
    keep = rows >= 0
    owner, rows, sims = owner[keep], rows[keep], sims[keep]
    order = np.lexsort((-sims, rows, owner))
    owner, rows, sims = owner[order], rows[order], sims[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (owner[1:] != owner[:-1]) | (rows[1:] != rows[:-1])
    return owner[first], rows[first], sims[first]


def _flat(owner: list[np.ndarray], rows: list[np.ndarray], sims: list[np.ndarray]
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return np.concatenate(owner), np.concatenate(rows), np.concatenate(sims)


def lookup_best(table: tuple[np.ndarray, np.ndarray, np.ndarray], picked: np.ndarray
                ) -> np.ndarray:
    """Best score of each (question i, row picked[i, t]) in a ``best_scores`` table
    (-inf where the pair is absent or the row is -1)."""
    q_u, r_u, s_u = table
    out = np.full(picked.shape, -np.inf, dtype=np.float32)
    if not len(q_u):
        return out
    base = int(max(r_u.max(), picked.max(initial=0))) + 1
    keys = q_u * base + r_u                      # sorted: the table is by owner, then row
    want = np.arange(picked.shape[0])[:, None] * base + picked
    at = np.clip(np.searchsorted(keys, want), 0, len(keys) - 1)
    found = (picked >= 0) & (keys[at] == want)
    out[found] = s_u[at[found]]
    return out


def rankings(picked: np.ndarray, owner: np.ndarray, rows: np.ndarray, sims: np.ndarray,
             keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The final ranking rule for every question at once (vectorised ``final_ranking``).

    ``picked`` (n, T) rows in step order (-1: none); (owner, rows, sims) every search
    result the questions' states got. Returns (R, S) as ``ChainRun.ranking`` /
    ``ranking_scores``: picked rows first (+inf), then the others by best score (desc),
    row ascending on ties; each question keeps ``max(keep, picked)`` rows.
    """
    n = picked.shape[0]
    if n == 0:
        return np.zeros((0, 0), np.int64), np.zeros((0, 0), np.float32)
    head = np.take_along_axis(picked, np.argsort(picked < 0, axis=1, kind="stable"), axis=1)
    n_head = (head >= 0).sum(axis=1)
    q_u, r_u, s_u = best_scores(owner, rows, sims)
    if picked.size:
        base = int(max(r_u.max(initial=0), picked.max(initial=0))) + 1
        is_head = np.isin(q_u * base + r_u, (np.arange(n)[:, None] * base + picked)[picked >= 0])
        q_u, r_u, s_u = q_u[~is_head], r_u[~is_head], s_u[~is_head]
    order = np.lexsort((r_u, -s_u, q_u))
    q_u, r_u, s_u = q_u[order], r_u[order], s_u[order]
    counts = np.bincount(q_u, minlength=n)
    pos = np.arange(len(q_u)) - (np.cumsum(counts) - counts)[q_u] + n_head[q_u]
    limit = np.maximum(keep, n_head)
    fits = pos < limit[q_u]
    lengths = np.minimum(n_head + counts, limit)
    width = int(lengths.max(initial=0))
    R = np.full((n, width), -1, dtype=np.int64)
    S = np.full((n, width), -np.inf, dtype=np.float32)
    hw = head.shape[1]
    if hw and width:
        R[:, :min(hw, width)] = head[:, :width]
        S[:, :min(hw, width)] = np.where(head[:, :width] >= 0, np.inf, -np.inf)
    R[q_u[fits], pos[fits]] = r_u[fits]
    S[q_u[fits], pos[fits]] = s_u[fits]
    return R, S


def final_ranking(picked: Sequence[int], best: dict[int, float], keep: int
                  ) -> tuple[list[int], list[float]]:
    """Picked rows in step order, then the others by best score (desc), row asc on ties."""
    head = [int(r) for r in picked if int(r) >= 0]
    head_set = set(head)
    rest = sorted((r for r in best if r not in head_set), key=lambda r: (-best[r], r))
    rows = (head + rest)[:max(keep, len(head))]
    scores = [float("inf")] * len(head) + [best[r] for r in rows[len(head):]]
    return rows, scores


def greedy_chain(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
                 steps: int, *, depth: int = 100, keep: int = 100,
                 progress: Advance | None = None) -> ChainRun:
    """Greedy chain search for ``steps`` steps over all questions (batched per step);
    ``progress`` is advanced by ``n_questions`` after each step (total: steps x questions)."""
    picked = np.full((n_questions, steps), -1, dtype=np.int64)
    picked_scores = np.full((n_questions, steps), -np.inf, dtype=np.float32)
    seen_ids: list[np.ndarray] = []
    seen_sims: list[np.ndarray] = []
    for t in range(steps):
        states = [(qi, [int(x) for x in picked[qi, :t] if x >= 0])
                  for qi in range(n_questions)]
        picks, scores, sims, ids = next_picks(states, text_of, encode, search, depth)
        picked[:, t], picked_scores[:, t] = picks, scores
        seen_ids.append(ids)
        seen_sims.append(sims)
        if progress is not None:
            progress(n_questions)
    owner, rows, sims = _flat([np.repeat(np.arange(n_questions), ids.shape[1])
                               for ids in seen_ids],
                              [ids.ravel() for ids in seen_ids],
                              [s.ravel() for s in seen_sims])
    R, S = rankings(picked, owner, rows, sims, keep)
    return ChainRun(picked, picked_scores, R, S, n_questions * steps)


def beam_chain(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
               steps: int, *, width: int = 4, depth: int = 100, keep: int = 100,
               progress: Advance | None = None) -> ChainRun:
    """Beam search of width W: each beam expands to its W best new passages, the W best
    histories by summed score survive; the best final beam is the chain. The ranking's
    tail uses the best score each passage got in any state encoded for the question.
    With W = 1 this is greedy search. Encodes n * (1 + W * (T - 1)) states at most.
    ``progress`` is advanced by ``n_questions`` after each step."""
    beams: list[list[tuple[tuple[int, ...], float]]] = [[((), 0.0)] for _ in range(n_questions)]
    seen_owner: list[np.ndarray] = []
    seen_ids: list[np.ndarray] = []
    seen_sims: list[np.ndarray] = []
    encoded = 0
    for _ in range(steps):
        flat = [(qi, hist) for qi in range(n_questions) for hist, _ in beams[qi]]
        owners = [(qi, b) for qi in range(n_questions) for b in range(len(beams[qi]))]
        Q = encode(state_texts_of(text_of, flat))
        encoded += len(flat)
        k = depth + max((len(h) for _, h in flat), default=0)
        sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), k)
        sims = np.asarray(sims, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        seen_owner.append(np.repeat(np.array([qi for qi, _ in owners], dtype=np.int64),
                                    ids.shape[1]))
        seen_ids.append(ids.ravel())
        seen_sims.append(sims.ravel())
        cands: list[list[tuple[tuple[int, ...], float]]] = [[] for _ in range(n_questions)]
        for i, (qi, b) in enumerate(owners):
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
            progress(n_questions)
    picked = np.full((n_questions, steps), -1, dtype=np.int64)
    for qi in range(n_questions):
        hist, _ = beams[qi][0]
        picked[qi, :len(hist)] = hist
    owner, rows, sims = _flat(seen_owner, seen_ids, seen_sims)
    R, S = rankings(picked, owner, rows, sims, keep)
    picked_scores = lookup_best(best_scores(owner, rows, sims), picked)
    return ChainRun(picked, picked_scores, R, S, encoded)


def single_shot(n_questions: int, text_of: TextOf, encode: Encode, search: Search,
                *, keep: int = 100) -> ChainRun:
    """The baseline: one search with the question alone; its top ``keep`` is the ranking."""
    Q = encode(state_texts_of(text_of, [(qi, ()) for qi in range(n_questions)]))
    sims, ids = search(np.ascontiguousarray(Q, dtype=np.float32), keep)
    ids = np.asarray(ids, dtype=np.int64)
    return ChainRun(ids[:, :1].copy(), np.asarray(sims[:, :1], np.float32), ids,
                    np.asarray(sims, np.float32), n_questions)


# ---------------------------------------------------------------- metrics (pure)

def complete_at_k(ranking: np.ndarray, golds: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """C@k per question: 1.0 when every gold row is in the top k of the ranking."""
    return np.array([float(set(g) <= set(ranking[i, :k].tolist()))
                     for i, g in enumerate(golds)], dtype=np.float64)


def chain_recall_at_k(ranking: np.ndarray, golds: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Share of a question's gold rows in the top k of the ranking."""
    return np.array([len(set(g) & set(ranking[i, :k].tolist())) / len(set(g))
                     for i, g in enumerate(golds)], dtype=np.float64)


def chain_metrics(ranking: np.ndarray, golds: Sequence[Sequence[int]],
                  ks: Sequence[int] = (5, 10), recall_ks: Sequence[int] = (5, 10, 20)
                  ) -> dict[str, object]:
    """C@k and recall@k (in %), overall and by hop count: {"all": {...}, "by_hops": {h: ...}}."""
    cols = {f"C@{k}": complete_at_k(ranking, golds, k) for k in ks}
    cols.update({f"recall@{k}": chain_recall_at_k(ranking, golds, k) for k in recall_ks})
    hops = np.array([len(g) for g in golds])

    def summary(mask: np.ndarray) -> dict[str, float]:
        out = {name: round(100.0 * float(v[mask].mean()), 2) if mask.any() else float("nan")
               for name, v in cols.items()}
        out["n"] = int(mask.sum())
        return out

    return {"all": summary(np.ones(len(golds), dtype=bool)),
            "by_hops": {int(h): summary(hops == h) for h in sorted(set(hops.tolist()))}}


__all__ = ["ChainRun", "beam_chain", "best_scores", "chain_metrics", "complete_at_k",
           "final_ranking", "first_free", "greedy_chain", "lookup_best", "next_picks",
           "rankings",
           "chain_recall_at_k", "single_shot", "state_texts_of"]
