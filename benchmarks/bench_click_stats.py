"""The click view's passes over the shown records, over arrays against record by record:
a learning cycle's click view recomputes them over every shown record of the click window
(up to ``MAX_SHOWN``) each cycle, so their cost grows with the traffic; on a SciFact soak
they were most of the learner's time.

    python benchmarks/bench_click_stats.py [--records 200000] [--repeats 3]

Shown records in sessions (``_click_reference.sessions_traffic``: 40 searches x 10 ranks
a session, a third clicking by relevance, a third always rank 1, a third at random) and
fixed EM-like propensities; half the pairs judged. Times the cleaning
(:func:`~tttembed.loop.clicks.robust.clean_clicks`: its document-blind test, two passes,
is the part over arrays now), :func:`~tttembed.loop.clicks.rewards.click_stats` and
:func:`~tttembed.loop.clicks.rewards.doubly_robust` (the loop's) against the
record-by-record definitions (``_click_reference.py``, the loop's first version) on the
same records, the best of ``--repeats`` each, after checking both keep the same records
and give the same rows (pairs, order and counts equal, figures within 1e-9).

GOAL: the array version at least 2x faster (record-by-record seconds / array seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import _click_reference as ref  # noqa: E402
from claims import Goal, emit  # noqa: E402

GOALS = {"speedup": Goal("the click view's passes (cleaning, stats, doubly robust): record by "
                         "record / arrays", ">=", 2.0, "x")}


def best(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="shown records (>= 10)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per version (the best)")
    args = ap.parse_args(argv)
    if args.records < 10 or args.repeats < 1:
        ap.error("--records must be >= 10 and --repeats >= 1")
    from tttembed.loop.clicks.propensity import Propensities
    from tttembed.loop.clicks.rewards import click_stats, doubly_robust
    from tttembed.loop.clicks.robust import clean_clicks

    prop = Propensities((1.0, 0.7, 0.5, 0.4, 0.3, 0.2, 0.15, 0.12, 0.08, 0.05),
                        (1.0,) * 10, (1.0,) * 10, 0, "em")
    shown = ref.sessions_traffic(0, args.records)
    rng = np.random.default_rng(1)
    judge = {k: float(rng.integers(0, 2)) for k in sorted(ref.groups(shown))
             if rng.random() < 0.5}

    def arrays() -> tuple[Any, ...]:
        kept = clean_clicks(shown, prop).shown
        return kept, [(s.task, s.query, s.doc_id, s.reward, s.impressions, s.clicks,
                       s.exposure, s.variance, s.raw) for s in click_stats(kept, prop)], \
            [(d.task, d.query, d.doc_id, d.reward, d.judge, d.disagreement, d.impressions)
             for d in doubly_robust(kept, prop, judge)]

    def records() -> tuple[Any, ...]:
        kept = ref.clean(shown, prop)
        return kept, ref.stats(kept, prop), ref.doubly_robust(kept, prop, judge)

    new, old = arrays(), records()
    same = new[0] == old[0] and all(
        len(a) == len(b) and all(x[:3] == y[:3] for x, y in zip(a, b)) and np.allclose(
            [x[3:] for x in a], [y[3:] for y in b], rtol=1e-9, atol=1e-9)
        for a, b in zip(new[1:], old[1:]))
    if not same:
        print("error: the two versions give different rows", file=sys.stderr)
        return 1
    t_old, t_new = best(records, args.repeats), best(arrays, args.repeats)
    print(f"{args.records:,} shown records, {len(new[0]):,} kept, {len(new[1]):,} pairs, "
          f"{len(new[2]):,} judged: record by record {t_old:.3f} s, arrays {t_new:.3f} s "
          f"({t_old / t_new:.1f}x)", flush=True)
    emit(GOALS, {"speedup": t_old / t_new}, note=f"{args.records} records, best of "
                                                  f"{args.repeats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
