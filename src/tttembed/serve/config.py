"""What a server is started with. Travels to uvicorn's worker processes as JSON in an
environment variable (the API key never does: only the *name* of its variable)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from tttembed.core.errors import ConfigError

#: What ``unknown_task`` may be (None: refuse with a 404).
UNKNOWN_TASK = (None, "global", "raw")
#: Environment variable that carries the config to worker processes.
ENV = "TTTEMBED_SERVE_CONFIG"


@dataclass(frozen=True)
class ServeConfig:
    """``index`` folder; ``states`` files (re-read on reload); ``queries`` sources (BEIR
    folders or query files, one task each, named by ``tasks`` or their folder/stem) that
    name known tasks and the ids of their texts (query-wise states match by text without
    them); ``api_key_env`` the name of
    the variable holding the bearer key (none: no auth)."""

    index: str
    states: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    split: str = "test"
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    api_key_env: str | None = None
    allow_foreign_state: bool = False
    #: A task no state or query file names: None -> 404 listing the known tasks;
    #: "global" -> global states only; "raw" -> the raw vectors.
    unknown_task: str | None = None
    max_body_bytes: int = 2_000_000
    max_inputs: int = 2048
    max_k: int = 1000
    cache_size: int = 50_000
    #: model batches: at most ``max_batch`` texts, a lone request waiting ``max_wait_ms``
    max_batch: int = 32
    max_wait_ms: float = 2.0
    graceful_timeout_s: float = 30.0
    log_level: str = "info"
    #: a state registry (``--registry``): serve its promoted version, reloaded when it
    #: changes; log traffic and take feedback into ``store`` (default: its loop.sqlite)
    registry: str | None = None
    store: str | None = None
    #: a database registry's local copy of the versions served (None: the default)
    registry_cache: str | None = None
    #: seconds between looks at the registry's served version
    registry_poll_s: float = 1.0
    #: RandPair exploration (``--explore``): the fraction of searches whose served top-k
    #: has one random adjacent pair (ranks r, r+1 within the top 10) swapped, logged as
    #: an intervention for the propensity estimate (needs ``registry``)
    explore: float = 0.0
    #: interleaving (``--interleave``): the fraction of searches served as a team-draft
    #: interleaving of the served version and the registry's candidate (while there is
    #: one), the online promotion test (needs ``registry``)
    interleave: float = 0.0
    #: ``POST /v1/events`` caps per session: clicks per search, clicks per query text
    #: (across searches), events of any action per search; past them, dropped
    max_clicks_per_search: int = 5
    max_clicks_per_query: int = 20
    max_events_per_search: int = 100

    def __post_init__(self) -> None:
        for name in ("states", "queries", "tasks"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(str(v) for v in
                                                 ([value] if isinstance(value, str) else value)))
        object.__setattr__(self, "index", str(self.index))
        if self.tasks and len(self.tasks) != len(self.queries):
            raise ConfigError(f"give one task name per query source ({len(self.queries)} "
                              f"sources, {len(self.tasks)} names)")
        if self.unknown_task not in UNKNOWN_TASK:
            raise ConfigError(f"unknown_task (--unknown-task) must be one of "
                              f"{', '.join(str(u) for u in UNKNOWN_TASK[1:])}, got "
                              f"{self.unknown_task!r}")
        if self.workers < 1 or self.max_inputs < 1 or self.max_body_bytes < 1:
            raise ConfigError("workers, max_inputs and max_body_bytes must be >= 1")
        if self.registry and self.states:
            raise ConfigError("--registry serves the registry's promoted version: drop "
                              "--state (or serve the files without --registry)")
        if self.store and not self.registry:
            raise ConfigError("--store needs --registry (the versions its traffic feeds)")
        if not 0 <= self.explore <= 1:
            raise ConfigError(f"explore (--explore) must be a fraction in [0, 1], got "
                              f"{self.explore}")
        if not 0 <= self.interleave <= 1:
            raise ConfigError(f"interleave (--interleave) must be a fraction in [0, 1], "
                              f"got {self.interleave}")
        if self.interleave and not self.registry:
            raise ConfigError("--interleave needs --registry (it tests the registry's "
                              "candidate version)")
        if self.explore and not self.registry:
            raise ConfigError("--explore needs --registry (its searches are logged there "
                              "as interventions)")
        if min(self.max_clicks_per_search, self.max_clicks_per_query,
               self.max_events_per_search) < 1:
            raise ConfigError("max_clicks_per_search, max_clicks_per_query and "
                              "max_events_per_search must be >= 1")
        if self.max_batch < 1 or not 0 <= self.max_wait_ms <= 1000:
            raise ConfigError("max_batch (--max-batch) must be >= 1 and max_wait_ms "
                              "(--max-wait-ms) within 0..1000")

    def api_key(self) -> str | None:
        """The bearer key from ``api_key_env`` (an error if that variable is unset/empty)."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise ConfigError(f"--api-key-env {self.api_key_env}: that environment variable "
                              "is unset or empty")
        return key

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeConfig:
        raw = os.environ.get(ENV)
        if not raw:
            raise ConfigError(f"{ENV} is not set (start workers with `tttembed serve`)")
        return cls(**json.loads(raw))
