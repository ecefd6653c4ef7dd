"""What a server is started with. Travels to uvicorn's worker processes as JSON in an
environment variable (the API key never does: only the *name* of its variable)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tttembed.core.errors import ConfigError
from tttembed.loop.retention import Retention
from tttembed.loop.rows import ClickCaps

#: What ``unknown_task`` may be (None: refuse with a 404).
UNKNOWN_TASK = (None, "global", "raw")
#: Environment variable that carries the config to worker processes.
ENV = "TTTEMBED_SERVE_CONFIG"


@dataclass(frozen=True)
class Listen:
    """Where and how the server listens: ``host``, ``port``, ``workers`` processes, the
    seconds in-flight requests get at shutdown, the log level."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    graceful_timeout_s: float = 30.0
    log_level: str = "info"


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask: body bytes, texts, results per query, characters per
    query (:data:`tttembed.serve.wire.MAX_QUERY_CHARS`)."""

    max_body_bytes: int = 2_000_000
    max_inputs: int = 2048
    max_k: int = 1000
    max_query_chars: int = 16_384


@dataclass(frozen=True)
class Batching:
    """The model side: ``cache_size`` vectors in the LRU cache; model batches of at most
    ``max_batch`` texts, a lone request waiting ``max_wait_ms`` for others."""

    cache_size: int = 50_000
    max_batch: int = 32
    max_wait_ms: float = 2.0


@dataclass(frozen=True)
class ServeLoop:
    """The server's part in the closed loop. ``registry`` (``--registry``): serve its
    promoted version, reloaded when it changes, looked at every ``registry_poll_s``
    seconds; log traffic and take feedback into ``store`` (default: its loop.sqlite);
    ``registry_cache`` a database registry's local copy of the versions served (None: the
    default). ``explore`` (``--explore``): the fraction of searches whose served top-k has
    one random adjacent pair (ranks r, r+1 within the top 10) swapped, logged as an
    intervention for the propensity estimate. ``interleave`` (``--interleave``): the
    fraction of searches served as a team-draft interleaving of the served version and
    the registry's candidate (while there is one), the online promotion test. Both need
    ``registry``; ``retention``: what the store keeps (``--retain``)."""

    registry: str | None = None
    store: str | None = None
    registry_cache: str | None = None
    registry_poll_s: float = 1.0
    explore: float = 0.0
    interleave: float = 0.0
    #: how long the store keeps traffic (``--retain``; each replica prunes in the
    #: background: :mod:`tttembed.loop.pruner`)
    retention: Retention = Retention()

    def __post_init__(self) -> None:
        if isinstance(self.retention, dict):  # read back from ServeConfig.to_json
            object.__setattr__(self, "retention", Retention(**self.retention))


#: The groups of a :class:`ServeConfig`, by field name; the flat keywords (CLI flags,
#: :func:`tttembed.serve.create_app`'s keywords) are their fields' names, and the click
#: caps' ``max_<name>`` (:data:`CLICK_OPTIONS`).
GROUPS: dict[str, type] = {"listen": Listen, "limits": RequestLimits, "batching": Batching,
                           "loop": ServeLoop, "clicks": ClickCaps}
#: ``POST /v1/events`` caps per session, flat keyword -> :class:`ClickCaps` field: clicks
#: per search, clicks per query text (across searches), events of any action per search.
CLICK_OPTIONS = {"max_clicks_per_search": "per_search", "max_clicks_per_query": "per_query",
                 "max_events_per_search": "events_per_search"}


@dataclass(frozen=True)
class ServeConfig:
    """``index`` folder; ``states`` files (re-read on reload); ``queries`` sources (BEIR
    folders or query files, one task each, named by ``tasks`` or their folder/stem) that
    name known tasks and the ids of their texts (query-wise states match by text without
    them); ``api_key_env`` the name of the variable holding the bearer key (none: no
    auth); the settings that travel together in their groups. Built from flat keywords
    by :meth:`from_options`."""

    index: str
    states: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    split: str = "test"
    api_key_env: str | None = None
    allow_foreign_state: bool = False
    #: the documents' texts for ``/v1/search``'s ``include`` (``--corpus``; None: the
    #: source the index records, read on the first search that asks)
    corpus: str | None = None
    #: A task no state or query file names: None -> 404 listing the known tasks;
    #: "global" -> global states only; "raw" -> the raw vectors.
    unknown_task: str | None = None
    #: ``--chain``: the chain route's encoder (``base``, a checkpoint folder, a chain
    #: registry or ``REGISTRY@vN``); None: no ``/v1/chain/search``
    chain: str | None = None
    #: ``--chain-max-seq-length``: the state token limit of the chain encoder (as
    #: ``tttembed chain search --max-seq-length``); None: each encoder's own (the limit
    #: its checkpoint records, 128 for base)
    chain_max_seq_length: int | None = None
    #: ``--chain-state``: the chain's state form (text or entities); None: each
    #: encoder's own (its checkpoint's record, entities for base)
    chain_state: str | None = None
    #: ``--upstream-deadline``: seconds a search waits for an HTTP embedder (the index's
    #: ``openai:`` upstream), every attempt and wait together, before its 502
    upstream_deadline_s: float = 30.0
    listen: Listen = field(default_factory=Listen)
    limits: RequestLimits = field(default_factory=RequestLimits)
    batching: Batching = field(default_factory=Batching)
    loop: ServeLoop = field(default_factory=ServeLoop)
    clicks: ClickCaps = field(default_factory=ClickCaps)

    @classmethod
    def from_options(cls, **options: Any) -> ServeConfig:
        """A config from flat keywords (``port=8001, explore=0.1, max_clicks_per_search=3``):
        each goes to its group; the others (``index``, ``states``, ...) are the config's."""
        grouped: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
        top: dict[str, Any] = {}
        for key, value in options.items():
            group = next((name for name, kind in GROUPS.items()
                          if name != "clicks" and key in {f.name for f in fields(kind)}), None)
            if group is not None:
                grouped[group][key] = value
            elif key in CLICK_OPTIONS:
                grouped["clicks"][CLICK_OPTIONS[key]] = value
            else:
                top[key] = value
        groups = {name: GROUPS[name](**kw) for name, kw in grouped.items() if kw}
        return cls(**top, **groups)

    def __post_init__(self) -> None:
        for name in ("states", "queries", "tasks"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(str(v) for v in
                                                 ([value] if isinstance(value, str) else value)))
        object.__setattr__(self, "index", str(self.index))
        if self.corpus is not None:
            object.__setattr__(self, "corpus", str(self.corpus))
        if self.tasks and len(self.tasks) != len(self.queries):
            raise ConfigError(f"give one task name per query source ({len(self.queries)} "
                              f"sources, {len(self.tasks)} names)")
        if self.unknown_task not in UNKNOWN_TASK:
            raise ConfigError(f"unknown_task (--unknown-task) must be one of "
                              f"{', '.join(str(u) for u in UNKNOWN_TASK[1:])}, got "
                              f"{self.unknown_task!r}")
        _check_groups(self)

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
    def from_json(cls, raw: str) -> ServeConfig:
        """The config :meth:`to_json` wrote (its groups as objects)."""
        data = json.loads(raw)
        return cls(**{key: GROUPS[key](**value) if key in GROUPS else value
                      for key, value in data.items()})

    @classmethod
    def from_env(cls) -> ServeConfig:
        raw = os.environ.get(ENV)
        if not raw:
            raise ConfigError(f"{ENV} is not set (start workers with `tttembed serve`)")
        return cls.from_json(raw)


def _check_groups(config: ServeConfig) -> None:
    """The groups' own bounds, and what one group needs of another."""
    loop, caps = config.loop, config.clicks
    if config.listen.workers < 1 or config.limits.max_inputs < 1 or \
            config.limits.max_body_bytes < 1 or config.limits.max_query_chars < 1:
        raise ConfigError("workers, max_inputs, max_body_bytes and max_query_chars must be "
                          ">= 1")
    if loop.registry and config.states:
        raise ConfigError("--registry serves the registry's promoted version: drop "
                          "--state (or serve the files without --registry)")
    if loop.store and not loop.registry:
        raise ConfigError("--store needs --registry (the versions its traffic feeds)")
    if not 0 <= loop.explore <= 1:
        raise ConfigError(f"explore (--explore) must be a fraction in [0, 1], got "
                          f"{loop.explore}")
    if not 0 <= loop.interleave <= 1:
        raise ConfigError(f"interleave (--interleave) must be a fraction in [0, 1], "
                          f"got {loop.interleave}")
    if loop.interleave and not loop.registry:
        raise ConfigError("--interleave needs --registry (it tests the registry's "
                          "candidate version)")
    if loop.explore and not loop.registry:
        raise ConfigError("--explore needs --registry (its searches are logged there "
                          "as interventions)")
    if min(caps.per_search, caps.per_query, caps.events_per_search) < 1:
        raise ConfigError("max_clicks_per_search, max_clicks_per_query and "
                          "max_events_per_search must be >= 1")
    if config.batching.max_batch < 1 or not 0 <= config.batching.max_wait_ms <= 1000:
        raise ConfigError("max_batch (--max-batch) must be >= 1 and max_wait_ms "
                          "(--max-wait-ms) within 0..1000")
