"""The Ray Data stage: ``map_batches`` over an actor pool, one model load per actor.

Imported only when the ``ray`` executor runs; ``ray`` is imported inside functions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tttembed.core.errors import BackendError, MissingDependency
from tttembed.embed.base import Kind, get_embedder
from tttembed.execute.config import Ray


def import_ray() -> Any:
    """The ``ray`` module with Ray Data, or MissingDependency."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise MissingDependency("ray", "ray") from exc
    return ray


#: Seconds a cluster's head may take to answer before --ray-address is given up
#: (``ray.init`` itself retries without bound against an address nothing listens on).
CONNECT_TIMEOUT_ENV = "TTTEMBED_RAY_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 15.0


def probe_head(address: str | None, timeout: float | None = None) -> None:
    """For ``HOST:PORT`` and ``ray://HOST:PORT``: a TCP connection to the head within
    ``timeout`` seconds ($TTTEMBED_RAY_CONNECT_TIMEOUT, default 15), else a BackendError
    that says what was tried and for how long (``auto``/``local``/None: nothing to probe)."""
    import os
    import socket

    if address is None or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    wait = float(timeout if timeout is not None
                 else os.environ.get(CONNECT_TIMEOUT_ENV) or CONNECT_TIMEOUT_S)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=wait).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise BackendError(
            f"cannot reach the Ray cluster at --ray-address {address}: {reason} from "
            f"{host}:{port} within {wait:g} s (${CONNECT_TIMEOUT_ENV} sets the wait); is "
            "the head node up (`ray status` there), and is the port the head's (6379) or "
            "its Ray Client server's (ray://HEAD:10001)?") from None


def ensure_ray(address: str | None = None) -> Any:
    """Connect to the cluster at ``address`` (``None``: the one this process already
    uses, else a new local one) unless Ray is initialised already; returns ``ray``. A
    ``HOST:PORT`` address is probed first, so an unreachable head fails within a bound
    (:func:`probe_head`) instead of waiting for ever."""
    ray = import_ray()
    if not ray.is_initialized():
        probe_head(address)
        try:
            ray.init(address=address, include_dashboard=False, ignore_reinit_error=True,
                     log_to_driver=False)
        except (ValueError, ConnectionError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise BackendError(f"cannot reach the Ray cluster at --ray-address {address}: "
                               f"{type(exc).__name__}: {first}; is the head node up (`ray "
                               "status`), and is the address auto, ray://HEAD:10001 or "
                               "HEAD:6379?") from None
    return ray


class EmbedActor:
    """One model replica: built once per actor, then called on batches of texts."""

    def __init__(self, spec: str, options: Mapping[str, Any], kind: Kind) -> None:
        self.embedder = get_embedder(spec, **dict(options))
        self.kind = kind

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]]
        vecs = np.asarray(self.embedder.encode(texts, self.kind), dtype=np.float32)
        return {"pos": np.asarray(batch["pos"], dtype=np.int64), "vec": vecs}


def run_embed_stage(spec: str, options: Mapping[str, Any], kind: Kind, texts: Sequence[str], *,
                    settings: Ray, batch_size: int, num_cpus: float = 1.0
                    ) -> Iterator[tuple[list[int], np.ndarray]]:
    """Yield ``(positions in texts, vectors)`` for each batch as the actors return it."""
    ray = ensure_ray(settings.address)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    blocks = max(1, -(-len(texts) // max(1, int(batch_size))))
    ds = ray.data.from_items([{"pos": i, "text": t} for i, t in enumerate(texts)],
                             override_num_blocks=blocks)
    ds = ds.map_batches(
        EmbedActor, fn_constructor_kwargs={"spec": spec, "options": dict(options), "kind": kind},
        batch_size=int(batch_size), batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=max(1, int(settings.actors))),
        num_gpus=float(settings.gpus) or None, num_cpus=float(num_cpus))
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        yield [int(p) for p in batch["pos"]], np.asarray(batch["vec"], dtype=np.float32)


class ScoreActor:
    """One scorer replica (no ledger: the driver commits), called on batches of pairs."""

    def __init__(self, spec: str, corpus: Any, options: Mapping[str, Any]) -> None:
        from tttembed.score.build import build_scorer

        self.scorer = build_scorer(spec, corpus, use_ledger=False, **dict(options))

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from tttembed.score.base import Item

        rewards = np.full(len(batch["g"]), np.nan, dtype=np.float64)
        groups: dict[int, list[int]] = {}
        for j, g in enumerate(batch["g"]):
            groups.setdefault(int(g), []).append(j)
        for rows in groups.values():
            query = Item(str(batch["qid"][rows[0]]), str(batch["qtext"][rows[0]]))
            docs = [Item(str(batch["did"][j]), str(batch["dtext"][j])) for j in rows]
            rewards[rows] = np.asarray(self.scorer.score(query, docs), dtype=np.float64)
        return {"g": np.asarray(batch["g"]), "dtext": np.asarray(batch["dtext"]),
                "reward": rewards}


def run_score_stage(spec: str, corpus: Any, options: Mapping[str, Any],
                    rows: Mapping[str, Sequence[Any]], *, settings: Ray,
                    batch_size: int, num_cpus: float = 1.0
                    ) -> Iterator[Mapping[str, np.ndarray]]:
    """Yield result blocks (``g``, ``dtext``, ``reward`` columns) as the actors return them."""
    ray = ensure_ray(settings.address)
    ray.data.DataContext.get_current().enable_progress_bars = False
    n = len(rows["g"])
    items = [{k: rows[k][i] for k in rows} for i in range(n)]
    ds = ray.data.from_items(items, override_num_blocks=max(1, -(-n // max(1, batch_size))))
    ds = ds.map_batches(
        ScoreActor, fn_constructor_kwargs={"spec": spec, "corpus": corpus,
                                           "options": dict(options)},
        batch_size=int(batch_size), batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=max(1, int(settings.actors))),
        num_gpus=float(settings.gpus) or None, num_cpus=float(num_cpus))
    yield from ds.iter_batches(batch_size=None, batch_format="numpy")
