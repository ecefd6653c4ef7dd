"""Sequential tests on interleaving outcomes (+1 B wins, −1 A wins, 0 tie; ties ignored),
at alpha 0.05, that stop as soon as they can (METHOD.md Part 4).

- ``sprt``: Wald's SPRT of H0 p = 1/2 against H1 p = ``p1`` (p = P(B wins | not a tie)),
  beta 0.2: "B better" when the log likelihood ratio reaches log((1 − β)/α), "A better or
  equal" when it falls to log(β/(1 − α)).
- ``msprt``: the mixture SPRT (Robbins; Johari et al., "Always valid inference", 2017) on
  the ±1 outcomes, a normal mixture of width ``tau`` over the mean; its always-valid
  p-value is min(1, 1 / max_n Λ_n) (Ville's inequality), one-sided for B and for A:
  "B better" when B's p ≤ α, "A better or equal" when A's p ≤ α, or after ``max_n``
  outcomes without a decision.

The array functions take cumulative wins/losses of any shape, so a benchmark can run
many streams at once with the same arithmetic the class uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tttembed.core.errors import ConfigError

DECISIONS = ("B better", "A better or equal", "undecided")


def sprt_llr(wins: np.ndarray, losses: np.ndarray, p1: float) -> np.ndarray:
    """Wald's log likelihood ratio of p = ``p1`` against p = 1/2 (wins: B's)."""
    return wins * np.log(2 * p1) + losses * np.log(2 * (1 - p1))


def msprt_log_lr(wins: np.ndarray, losses: np.ndarray, tau: float) -> np.ndarray:
    """log Λ_n of the normal-mixture SPRT on ±1 outcomes (σ² = 1 under H0) for "B's mean
    is above 0": the two-sided mixture where the mean is positive, 0 elsewhere."""
    n = np.asarray(wins + losses, dtype=np.float64)
    s = np.asarray(wins - losses, dtype=np.float64)
    t2 = tau * tau
    log_lr = -0.5 * np.log1p(n * t2) + (t2 * s * s) / (2 * (1 + n * t2))
    return np.where(s > 0, log_lr, 0.0)


@dataclass
class SequentialTest:
    """Feed outcomes with :meth:`update`; :attr:`decision` is "undecided" until the test
    stops, then fixed. ``n`` counts non-tie outcomes, ``searches`` all of them."""

    alpha: float = 0.05
    beta: float = 0.2
    p1: float = 0.6
    tau: float = 0.1
    method: str = "msprt"
    max_n: int | None = None
    wins: int = 0
    losses: int = 0
    searches: int = 0
    decision: str = "undecided"
    _max_b: float = field(default=0.0, repr=False)
    _max_a: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if self.method not in ("sprt", "msprt"):
            raise ConfigError(f"unknown sequential test {self.method!r} (use sprt or msprt)")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1 and 0.5 < self.p1 < 1):
            raise ConfigError("a sequential test needs 0 < alpha, beta < 1 and 1/2 < p1 < 1")

    @property
    def n(self) -> int:
        return self.wins + self.losses

    @property
    def p_value(self) -> float:
        """The always-valid p-value for "B better" (the mixture SPRT's, whatever method)."""
        return float(min(1.0, np.exp(-self._max_b)))

    def update(self, outcome: int) -> str:
        """Count one search's outcome (+1, −1 or 0) and return the decision."""
        if outcome not in (-1, 0, 1):
            raise ConfigError(f"an interleaving outcome is -1, 0 or 1, got {outcome!r}")
        self.searches += 1
        if self.decision != "undecided":
            return self.decision
        self.wins += outcome == 1
        self.losses += outcome == -1
        w, lo = np.float64(self.wins), np.float64(self.losses)
        self._max_b = max(self._max_b, float(msprt_log_lr(w, lo, self.tau)))
        self._max_a = max(self._max_a, float(msprt_log_lr(lo, w, self.tau)))
        self.decision = self._decide(float(sprt_llr(w, lo, self.p1)))
        return self.decision

    def _decide(self, llr: float) -> str:
        if self.method == "sprt":
            if llr >= np.log((1 - self.beta) / self.alpha):
                return DECISIONS[0]
            if llr <= np.log(self.beta / (1 - self.alpha)):
                return DECISIONS[1]
        elif self._max_b >= -np.log(self.alpha):
            return DECISIONS[0]
        elif self._max_a >= -np.log(self.alpha):
            return DECISIONS[1]
        if self.max_n is not None and self.n >= self.max_n:
            return DECISIONS[1]
        return DECISIONS[2]


def first_decisions(outcomes: np.ndarray, test: SequentialTest) -> tuple[np.ndarray, np.ndarray]:
    """Run ``test``'s rule (its settings, not its counts) on each row of ``outcomes``
    (runs × searches of −1/0/1) at once: the decision index into :data:`DECISIONS` and
    the searches used (the row length when undecided)."""
    wins = np.cumsum(outcomes == 1, axis=1).astype(np.float64)
    losses = np.cumsum(outcomes == -1, axis=1).astype(np.float64)
    if test.method == "sprt":
        llr = sprt_llr(wins, losses, test.p1)
        up = llr >= np.log((1 - test.beta) / test.alpha)
        down = llr <= np.log(test.beta / (1 - test.alpha))
    else:
        up = msprt_log_lr(wins, losses, test.tau) >= -np.log(test.alpha)
        down = msprt_log_lr(losses, wins, test.tau) >= -np.log(test.alpha)
    if test.max_n is not None:
        down = down | (wins + losses >= test.max_n)
    return _first(up, down)


def _first(up: np.ndarray, down: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    length = up.shape[1]
    t_up = np.where(up.any(axis=1), up.argmax(axis=1), length)
    t_down = np.where(down.any(axis=1), down.argmax(axis=1), length)
    decision = np.where(t_up < t_down, 0, np.where(t_down < t_up, 1, 2))
    used = np.minimum(np.minimum(t_up, t_down) + 1, length)
    return decision, used
