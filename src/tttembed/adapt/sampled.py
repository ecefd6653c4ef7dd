"""A judged diff with a sampled validation budget (pure numpy).

When the never-judged documents of the compared top-k lists are more than the validation
budget, a uniform random sample of them is paid (:mod:`tttembed.ttt.guard`). Every list's
``Delta`` nDCG@k is linear in what its unpaid documents are worth: per row and list,

    Delta_j = known_j + open_j * f_j - open_base * f_base

where ``known_j`` is the difference of the judged documents' DCG, ``open_j`` /
``open_base`` the summed discounts of the unpaid positions (all over one ideal DCG) and
``f`` the mean reward of the paid sample of that kind of list (:func:`fill_samples`).
:func:`sampled_gains` bootstraps the queries (within each task) *and* the paid samples
together, so the interval carries the uncertainty of both; with fewer than
:data:`MIN_SAMPLE` paid documents of a kind, ``f`` is the reward's bound that leans
against the change (1 for the base list, 0 for the others). With nothing unpaid this is
the exact judged diff and its bootstrap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tttembed.adapt.validate import sign_flip_p

#: Fewest paid documents of a kind whose mean fills the unpaid ones.
MIN_SAMPLE = 5

__all__ = ["MIN_SAMPLE", "OpenParts", "fill_samples", "fill_value", "open_parts",
           "sampled_gains", "task_evidence"]

Samples = Mapping[tuple[str, str], np.ndarray]


def fill_value(values: np.ndarray, is_base: bool) -> float:
    """The mean of a paid sample, or (too small a sample) the bound against the change."""
    return float(np.mean(values)) if len(values) >= MIN_SAMPLE else float(is_base)


def fill_samples(tasks: Sequence[str], lists: Sequence[Mapping[str, Sequence[str]]],
                 judged: Sequence[Mapping[str, float]], paid: set[tuple[int, str]]
                 ) -> dict[tuple[str, str], np.ndarray]:
    """``(task, list name)`` -> rewards of the paid never-judged documents (``(row, doc)``
    in ``paid``) found in lists of that name (``lists[row][name]``)."""
    got: dict[tuple[str, str], list[float]] = {}
    for row, per in enumerate(lists):
        for name, docs in per.items():
            for d in docs:
                v = judged[row].get(d)
                if (row, d) in paid and v is not None and np.isfinite(v):
                    got.setdefault((tasks[row], name), []).append(float(v))
    return {key: np.asarray(v) for key, v in got.items()}


def _gain(v: float | None) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


@dataclass(frozen=True)
class OpenParts:
    """Per row: ``known`` (Q, L), ``open`` (Q, L), ``open_base`` (Q,) of the module's
    decomposition, and each row's task."""

    known: np.ndarray
    open: np.ndarray
    open_base: np.ndarray
    tasks: np.ndarray

    def columns(self, cols: Sequence[int]) -> OpenParts:
        return OpenParts(self.known[:, cols], self.open[:, cols], self.open_base, self.tasks)


def open_parts(base: Sequence[str], lists: Sequence[Sequence[str]],
               judged: Mapping[str, float], k: int, fill_base: float,
               fill_ideal: Sequence[float] = ()) -> tuple[np.ndarray, np.ndarray, float]:
    """One row: ``known`` (L,), ``open`` (L,), ``open_base``; the ideal DCG holds the judged
    rewards, ``fill_base`` for each unpaid document of ``base`` and ``fill_ideal``, the
    fills of the other lists' unpaid documents (each once), so that no filled list scores
    above the ideal (0s when the row has no judged gain)."""
    disc = 1.0 / np.log2(np.arange(2, k + 2))

    def split(docs: Sequence[str]) -> tuple[float, float]:
        known = opened = 0.0
        for i, d in enumerate(list(docs)[:k]):
            if d in judged:  # a judged pair without a usable reward counts 0
                known += (_gain(judged[d]) or 0.0) * disc[i]
            else:
                opened += disc[i]
        return known, opened

    kb, ob = split(base)
    n_open = sum(1 for d in list(base)[:k] if d not in judged)
    ideal = sorted([fill_base] * n_open + list(fill_ideal) + [g for v in judged.values()
                                           if (g := _gain(v)) is not None], reverse=True)[:k]
    idcg = float((np.asarray(ideal) * disc[: len(ideal)]).sum())
    if idcg <= 0:
        return np.zeros(len(lists)), np.zeros(len(lists)), 0.0
    parts = [split(a) for a in lists]
    return (np.array([(kj - kb) / idcg for kj, _ in parts]),
            np.array([oj / idcg for _, oj in parts]), ob / idcg)


def _fill_boot(values: np.ndarray | None, is_base: bool, n_boot: int,
               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The fill and its bootstrap replicates (constant for a sample too small)."""
    v = np.asarray(values if values is not None else [], dtype=np.float64)
    point = fill_value(v, is_base)
    if len(v) < MIN_SAMPLE:
        return point, np.full(n_boot, point)
    counts = rng.multinomial(len(v), np.full(len(v), 1.0 / len(v)), size=n_boot)
    return point, counts @ v / len(v)


def sampled_gains(parts: OpenParts, names: Sequence[str], base: str, samples: Samples, *,
                  n_boot: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per list (``names[j]``: the kind of list column ``j`` is, its fill's sample): the
    task-balanced mean Delta, its 95% bootstrap interval (queries within each task and the
    paid samples resampled together), and every row's Delta at the point fills."""
    tasks = list(dict.fromkeys(parts.tasks.tolist()))
    L = len(names)
    mean, boot = np.zeros(L), np.zeros((n_boot, L))
    deltas = np.zeros_like(parts.known)
    for t in tasks:
        hit = parts.tasks == t
        known, opened, ob = parts.known[hit], parts.open[hit], parts.open_base[hit]
        fb, fb_boot = _fill_boot(samples.get((t, base)), True, n_boot, rng)
        fills = [_fill_boot(samples.get((t, n)), n == base, n_boot, rng) for n in names]
        f = np.array([p for p, _ in fills])
        f_boot = np.stack([b for _, b in fills], axis=1)
        if any(n == base for n in names):  # the base's own column: the same replicates
            f_boot[:, [j for j, n in enumerate(names) if n == base]] = fb_boot[:, None]
        deltas[hit] = known + opened * f - ob[:, None] * fb
        n = int(hit.sum())
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot) / n
        boot += (w @ known + (w @ opened) * f_boot - (w @ ob)[:, None] * fb_boot[:, None]
                 ) / len(tasks)
        mean += deltas[hit].mean(0) / len(tasks)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return mean, lo, hi, deltas


def task_evidence(parts: OpenParts, names: Sequence[str], base: str, samples: Samples, *,
                  n_boot: int, rng: np.random.Generator
                  ) -> dict[str, dict[str, dict[str, float]]]:
    """Per task and list: the mean Delta, its 95% interval (:func:`sampled_gains` on the
    task's rows), a two-sided sign-flip p-value and the rows scored."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for t in dict.fromkeys(parts.tasks.tolist()):
        hit = parts.tasks == t
        sub = OpenParts(parts.known[hit], parts.open[hit], parts.open_base[hit],
                        parts.tasks[hit])
        mean, lo, hi, d = sampled_gains(sub, names, base, samples, n_boot=n_boot, rng=rng)
        out[t] = {n: {"gain": float(mean[j]), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                      "p": sign_flip_p(d[:, j], sub.tasks, 2000, rng),
                      "queries": float(hit.sum())} for j, n in enumerate(names)}
    return out
