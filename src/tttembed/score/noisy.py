"""``noisy-qrels:PATH?sigma=S&seed=N&flip=P``: human judgments degraded by known noise,
a reward model of controlled quality.

The clean reward is the ``qrels:`` one (``grade / top``, 0 when unjudged; PATH as for
``qrels:``). With probability ``flip`` a pair's clean reward ``g`` becomes ``1 - g``
(relevant and non-relevant swapped); then Gaussian noise of standard deviation ``sigma``
is added and the result clipped to [0, 1]:

    r = clip(flip_or_not(g) + sigma * eps, 0, 1)

``eps`` (standard normal, Box-Muller) and the flip draw come from a BLAKE2b hash of
``(seed, query id, doc id)``: a pair gets the same reward whatever the order, batching or
process, and ``sigma=0, flip=0`` is exactly ``qrels:``. Options go after ``?`` in the spec
(``sigma`` 0.0, ``seed`` 0, ``flip`` 0.0; also ``split`` as for ``qrels:``) or as keyword
options. Mapping: ``"grade/{top}+N(0,sigma)|flip=p, clip[0,1]"``.

Judgments are labels (``uses_labels``). ``tttembed eval`` also runs this scorer in the
fixed protocol, as a *controlled simulation* (``simulation = True``): rewards of evaluated
queries come from their own judgments, standing for a reranker of known quality, as the
seed's Qwen3-Reranker scores the evaluated queries; it is not a transfer result.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from tttembed.core.backends import identity
from tttembed.core.errors import ConfigError
from tttembed.score.base import Capabilities, Item, declare
from tttembed.score.qrels import QrelsScorer

OPTIONS = ("sigma", "seed", "flip", "split")


def parse_options(rest: str) -> tuple[str, dict[str, str]]:
    """``PATH?k=v&k=v`` -> (PATH, {k: v}); unknown or repeated keys are errors."""
    path, _, query = rest.partition("?")
    if not query:
        return path, {}
    try:
        items = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ConfigError(f"noisy-qrels options {query!r} are not k=v&k=v") from None
    out: dict[str, str] = {}
    for k, v in items:
        if k not in OPTIONS:
            raise ConfigError(f"unknown noisy-qrels option {k!r}; known: {', '.join(OPTIONS)}")
        if k in out:
            raise ConfigError(f"noisy-qrels option {k!r} given twice")
        out[k] = v
    return path, out


def _number(name: str, value: Any, kind: type) -> Any:
    try:
        got = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"noisy-qrels {name}={value!r} is not a {kind.__name__}") from None
    if kind is float and not math.isfinite(got):
        raise ConfigError(f"noisy-qrels {name} must be finite, got {value!r}")
    return got


def pair_draws(seed: int, qid: str, did: str) -> tuple[float, float]:
    """(standard normal, uniform [0, 1)) of one pair, from a hash of (seed, qid, did)."""
    h = hashlib.blake2b(f"{seed}\x1f{qid}\x1f{did}".encode(), digest_size=24).digest()
    u1, u2, u3 = (x / 2.0**64 for x in struct.unpack("<3Q", h))
    normal = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
    return normal, u3


class NoisyQrelsScorer:
    """Scorer: clip(grade/top (flipped with probability ``flip``) + N(0, sigma^2), 0, 1)."""

    simulation = True

    def __init__(self, rest: str, *, sigma: float | None = None, seed: int | None = None,
                 flip: float | None = None, split: str | None = None,
                 qrels: Mapping[str, Mapping[str, float]] | None = None) -> None:
        path, opts = parse_options(rest)
        for name, given in (("sigma", sigma), ("seed", seed), ("flip", flip), ("split", split)):
            if given is not None:
                if name in opts:
                    raise ConfigError(f"noisy-qrels {name} given both in the spec and as an "
                                      "option")
                opts[name] = str(given)
        self.sigma = _number("sigma", opts.get("sigma", 0.0), float)
        self.seed = _number("seed", opts.get("seed", 0), int)
        self.flip = _number("flip", opts.get("flip", 0.0), float)
        if self.sigma < 0 or not 0.0 <= self.flip <= 1.0:
            raise ConfigError(f"noisy-qrels needs sigma >= 0 and flip in [0, 1]; got "
                              f"sigma={self.sigma}, flip={self.flip}")
        self.clean = QrelsScorer(path, split=opts.get("split", "test"), qrels=qrels)
        self.spec = f"noisy-qrels:{rest}"
        self.mapping = (f"{self.clean.mapping}+N(0,{self.sigma:g})|flip={self.flip:g}, "
                        "clip[0,1]")
        #: What the rewards depend on besides the judgments (the eval cells key on it).
        self.label_identity = (f"noisy-qrels sigma={self.sigma:g} seed={self.seed} "
                               f"flip={self.flip:g}")
        self.identity = identity(self.spec, sigma=f"{self.sigma:g}", seed=self.seed,
                                 flip=f"{self.flip:g}")

    def score(self, query: Item, docs: Sequence[Item]) -> np.ndarray:
        clean = self.clean.score(query, docs)
        out = np.empty(len(docs), dtype=np.float64)
        for i, (d, g) in enumerate(zip(docs, clean)):
            eps, u = pair_draws(self.seed, query.id, d.id)
            r = 1.0 - g if u < self.flip else g
            out[i] = r + self.sigma * eps
        return np.clip(out, 0.0, 1.0)


@declare(Capabilities(uses_labels=True, cacheable=False))
def from_spec(rest: str, **options: Any) -> NoisyQrelsScorer:
    return NoisyQrelsScorer(rest, **options)
