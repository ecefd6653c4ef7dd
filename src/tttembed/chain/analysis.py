"""Analyses of chain retrieval (pure: arrays and callables, no I/O).

* state mismatch: among the states a run reached that still miss a gold passage, the share
  that already hold a wrong (non-gold) passage, per step (step s acts on a state with s - 1
  passages; step 1 is the question alone and is not listed);
* next-step success: on one fixed set of reached states, does the encoder's next pick hit
  a missing gold passage? Split by the number of wrong passages in the history (0 / 1 / ≥2);
* deletion counterfactual: the states holding a wrong passage, with the wrong passages
  removed from the state text (gold ones kept, in order), re-run with the same encoder; the
  removed passages stay excluded from the pick (they were retrieved already).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.chain.search import (
    ChainRun,
    Encode,
    Search,
    TextOf,
    beam_chain,
    chain_metrics,
    greedy_chain,
    next_picks,
    single_shot,
)
from tttembed.chain.states import missing_gold, n_wrong, reached_states
from tttembed.core.progress import Progress, stage
from tttembed.types import ChainState

log = logging.getLogger(__name__)

WRONG_BUCKETS = ("0", "1", ">=2")


def state_mismatch(picked: np.ndarray, golds: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """Per step s = 2..T: states still missing gold, how many hold a wrong passage, share %."""
    rows = []
    for s in range(2, picked.shape[1] + 1):
        n_missing = n_bad = 0
        for qi, gold in enumerate(golds):
            hist = [int(x) for x in picked[qi, :s - 1] if x >= 0]
            if not missing_gold(hist, gold):
                continue
            n_missing += 1
            n_bad += n_wrong(hist, gold) > 0
        rows.append({"step": s, "states": n_missing, "with_wrong": n_bad,
                     "share_wrong": round(100.0 * n_bad / n_missing, 2) if n_missing else None})
    return rows


def bucket(n: int) -> str:
    return "0" if n == 0 else "1" if n == 1 else ">=2"


def next_step_success(states: Sequence[ChainState], golds: Sequence[Sequence[int]],
                      text_of: TextOf, encode: Encode, search: Search,
                      depth: int = 100, exclude: Sequence[Sequence[int]] | None = None
                      ) -> np.ndarray:
    """Bool (n,): the next greedy pick of each state is one of its missing gold passages
    (``exclude``: rows also skipped by the pick, see ``next_picks``)."""
    picks, _, _, _ = next_picks(states, text_of, encode, search, depth, exclude)
    return np.array([int(p) in set(missing_gold(hist, golds[qi]))
                     for p, (qi, hist) in zip(picks, states)], dtype=bool)


def success_by_wrong(success: np.ndarray, states: Sequence[ChainState],
                     golds: Sequence[Sequence[int]]) -> dict[str, dict[str, float]]:
    """{bucket: {"rate": % success, "n": states}} for 0 / 1 / >=2 wrong passages."""
    buckets = np.array([bucket(n_wrong(h, golds[qi])) for qi, h in states])
    out = {}
    for b in WRONG_BUCKETS:
        mask = buckets == b if len(states) else np.zeros(0, dtype=bool)
        out[b] = {"rate": round(100.0 * float(success[mask].mean()), 2) if mask.any()
                  else float("nan"), "n": int(mask.sum())}
    return out


def delete_wrong(states: Sequence[ChainState], golds: Sequence[Sequence[int]]) -> list[ChainState]:
    """Each state with its wrong passages removed (gold passages kept in step order)."""
    return [(qi, tuple(h for h in hist if h in set(golds[qi]))) for qi, hist in states]


def deletion_counterfactual(states: Sequence[ChainState], golds: Sequence[Sequence[int]],
                            text_of: TextOf, encode: Encode, search: Search,
                            depth: int = 100) -> dict[str, float]:
    """Success % on the states with a wrong passage, as reached and with it deleted."""
    bad = [s for s in states if n_wrong(s[1], golds[s[0]]) > 0]
    if not bad:
        return {"n": 0, "original": float("nan"), "deleted": float("nan"), "cost": float("nan")}
    orig = next_step_success(bad, golds, text_of, encode, search, depth)
    # the deleted passages leave the state text but stay retrieved: the next pick still
    # skips them (else the encoder could simply take a deleted wrong passage again)
    dele = next_step_success(delete_wrong(bad, golds), golds, text_of, encode, search, depth,
                             exclude=[hist for _, hist in bad])
    o, d = 100.0 * float(orig.mean()), 100.0 * float(dele.mean())
    return {"n": len(bad), "original": round(o, 2), "deleted": round(d, 2),
            "cost": round(d - o, 2)}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _runs(golds: Sequence[Sequence[int]], text_of: TextOf, search: Search,
          encoders: Mapping[str, Encode], names: Sequence[str], *, steps: int, beam: bool,
          width: int, depth: int, progress: Progress | None
          ) -> tuple[dict[str, ChainRun], dict[str, Any], dict[str, float]]:
    """Greedy (``beam`` False) or beam chain runs of the named encoders: (runs, metrics,
    seconds per question), keyed by the system label."""
    n = len(golds)
    runs: dict[str, ChainRun] = {}
    systems: dict[str, Any] = {}
    latency: dict[str, float] = {}
    for name in names:
        label = f"beam{width} ({name})" if beam else f"chain ({name})"
        log.info("%s", label)
        advance = stage(progress, f"{'beam' if beam else 'chain'} search: {name}", steps * n)
        enc = encoders[name]
        t0 = time.perf_counter()
        if beam:
            run = beam_chain(n, text_of, enc, search, steps, width=width, depth=depth,
                             keep=depth, progress=advance)
        else:
            run = greedy_chain(n, text_of, enc, search, steps, depth=depth, keep=depth,
                               progress=advance)
        secs = time.perf_counter() - t0
        runs[label] = run
        systems[label] = chain_metrics(run.ranking, golds)
        latency[label] = secs / max(n, 1)
    return runs, systems, latency


def _recovery(fixed: Sequence[ChainState], golds: Sequence[Sequence[int]], text_of: TextOf,
              search: Search, encoders: Mapping[str, Encode], ref: str, depth: int,
              progress: Progress | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Next-step success and the deletion counterfactual of each encoder on ``fixed``."""
    recovery: dict[str, Any] = {"reference": ref, "n_states": len(fixed), "by_encoder": {}}
    deletion: dict[str, Any] = {"reference": ref}
    advance = stage(progress, "recovery analyses", len(encoders))
    for name, enc in encoders.items():
        log.info("recovery analyses: %s", name)
        ok = next_step_success(fixed, golds, text_of, enc, search, depth)
        recovery["by_encoder"][name] = success_by_wrong(ok, fixed, golds)
        deletion[name] = deletion_counterfactual(fixed, golds, text_of, enc, search, depth)
        advance(1)
    return recovery, deletion


def evaluate_chain(golds: Sequence[Sequence[int]], text_of: TextOf, search: Search,
                   encoders: Mapping[str, Encode], *, steps: int,
                   reference: str | None = None, beam_width: int = 0,
                   beam_encoders: Sequence[str] = (), depth: int = 100,
                   progress: Progress | None = None) -> dict[str, Any]:
    """The full chain evaluation for named encoders (the first is the 'untrained' one when
    the caller names it so). ``reference`` names the encoder whose reached states form the
    fixed state set of the recovery and deletion analyses (default: the last encoder).
    ``progress`` gets one stage per chain / beam run (total: steps x questions) and one for
    the recovery analyses (total: encoders).

    Returns {"systems": {name: metrics}, "mismatch": {name: rows}, "recovery": {...},
    "deletion": {...}, "latency_s_per_question": {system: seconds per question}}; rates
    are percentages (0-100).
    """
    n = len(golds)
    names = list(encoders)
    if not names:
        raise ValueError("no encoders to evaluate")
    first = names[0]
    res, secs = timed(lambda: single_shot(n, text_of, encoders[first], search, keep=depth))
    systems: dict[str, Any] = {f"single-shot ({first})": chain_metrics(res.ranking, golds)}
    latency = {f"single-shot ({first})": secs / max(n, 1)}
    runs, chain_systems, chain_latency = _runs(
        golds, text_of, search, encoders, names, steps=steps, beam=False, width=1,
        depth=depth, progress=progress)
    systems.update(chain_systems)
    latency.update(chain_latency)
    if beam_width > 1:
        _, beam_systems, beam_latency = _runs(
            golds, text_of, search, encoders, beam_encoders, steps=steps, beam=True,
            width=beam_width, depth=depth, progress=progress)
        systems.update(beam_systems)
        latency.update(beam_latency)
    mismatch = {name: state_mismatch(runs[f"chain ({name})"].picked, golds) for name in names}
    ref = reference or names[-1]
    fixed = reached_states(runs[f"chain ({ref})"].picked, golds)
    recovery, deletion = _recovery(fixed, golds, text_of, search, encoders, ref, depth,
                                   progress)
    return {"systems": systems, "mismatch": mismatch, "recovery": recovery,
            "deletion": deletion, "latency_s_per_question": latency}


__all__ = ["WRONG_BUCKETS", "bucket", "delete_wrong", "deletion_counterfactual",
           "evaluate_chain", "next_step_success", "state_mismatch", "success_by_wrong"]
