"""Prometheus text exposition, hand-written (no dependency): request counts by route and
status, a latency histogram by route, per-state hits, errors by type, reloads."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

#: Latency buckets in seconds (upper bounds; +Inf is added).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _labels(**labels: str) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items()) + "}"


class Metrics:
    """Thread-safe counters; ``render()`` gives the ``/metrics`` body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.state_hits: dict[str, int] = defaultdict(int)
        self.errors: dict[tuple[str, str], int] = defaultdict(int)
        self.reloads: dict[str, int] = defaultdict(int)
        self.inputs: dict[str, int] = defaultdict(int)
        self.generation = 0

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            row = self.buckets.setdefault(route, [0] * len(BUCKETS))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    row[i] += 1
            self.sums[route] += seconds
            self.counts[route] += 1

    def hit(self, hits: dict[str, int], route: str, n_inputs: int) -> None:
        with self._lock:
            for label, n in hits.items():
                self.state_hits[label] += n
            self.inputs[route] += n_inputs

    def error(self, route: str, kind: str) -> None:
        with self._lock:
            self.errors[(route, kind)] += 1

    def reload(self, ok: bool, generation: int) -> None:
        with self._lock:
            self.reloads["ok" if ok else "refused"] += 1
            self.generation = generation

    def render(self) -> str:
        with self._lock:
            return "".join(self._lines()) + ""

    def _lines(self) -> Iterable[str]:
        yield "# HELP tttembed_requests_total HTTP requests by method, route and status.\n"
        yield "# TYPE tttembed_requests_total counter\n"
        for (method, route, status), n in sorted(self.requests.items()):
            yield f"tttembed_requests_total{_labels(method=method, route=route, status=str(status))} {n}\n"
        yield "# HELP tttembed_request_seconds Request latency by route.\n"
        yield "# TYPE tttembed_request_seconds histogram\n"
        for route, row in sorted(self.buckets.items()):
            for bound, n in zip(BUCKETS, row):
                yield f"tttembed_request_seconds_bucket{_labels(route=route, le=str(bound))} {n}\n"
            yield f"tttembed_request_seconds_bucket{_labels(route=route, le='+Inf')} {self.counts[route]}\n"
            yield f"tttembed_request_seconds_sum{_labels(route=route)} {self.sums[route]:.6f}\n"
            yield f"tttembed_request_seconds_count{_labels(route=route)} {self.counts[route]}\n"
        yield from _counter("inputs_total", "Texts embedded or searched, by route.",
                            self.inputs, ("route",))
        yield from _counter("state_hits_total", "Query texts adapted, by state file.",
                            self.state_hits, ("state",))
        yield from _counter("errors_total", "Error responses by route and error type.",
                            self.errors, ("route", "type"))
        yield from _counter("reloads_total", "State reloads, swapped (ok) or refused.",
                            self.reloads, ("result",))
        yield "# HELP tttembed_states_generation Generation of the states in force.\n"
        yield "# TYPE tttembed_states_generation gauge\n"
        yield f"tttembed_states_generation {self.generation}\n"


def _counter(name: str, help_text: str, values: Mapping[Any, int],
             labels: tuple[str, ...]) -> Iterator[str]:
    """One Prometheus counter family: HELP, TYPE and a sample per label tuple, sorted."""
    yield f"# HELP tttembed_{name} {help_text}\n"
    yield f"# TYPE tttembed_{name} counter\n"
    for key, n in sorted(values.items()):
        parts = key if isinstance(key, tuple) else (key,)
        yield f"tttembed_{name}{_labels(**dict(zip(labels, parts)))} {n}\n"
