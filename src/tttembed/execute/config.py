"""Where model work runs: ``"local"`` (this process) or on Ray, described by one
:class:`Ray` object (httpx ``Limits`` style) instead of three loose keywords."""

from __future__ import annotations

from dataclasses import dataclass

from tttembed.core.errors import ConfigError
from tttembed.types import EXECUTORS


@dataclass(frozen=True)
class Ray:
    """Model work on Ray Data: the cluster at ``address`` (None: the Ray already
    initialised in this process, or a new local one), ``actors`` model replicas (one model
    load each) with ``gpus`` GPUs each.

        >>> tt.learn(index, "data/scifact", scorer="cross-encoder:PATH",
        ...          executor=Ray(address="auto", actors=4, gpus=1))
    """

    address: str | None = None
    actors: int = 1
    gpus: float = 0.0

    def __post_init__(self) -> None:
        check_address(self.address)
        if int(self.actors) < 1:
            raise ConfigError(f"Ray(actors=...) must be at least 1, got {self.actors}")
        if float(self.gpus) < 0:
            raise ConfigError(f"Ray(gpus=...) must be >= 0, got {self.gpus}")


def check_address(address: str | None) -> None:
    """A Ray address is ``auto``, ``local``, ``ray://HOST:PORT`` (Ray Client) or
    ``HOST:PORT`` (the head's GCS); anything else is a ConfigError with the forms."""
    if address is None or address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray-address {address!r} is not a Ray address; give auto, "
                          "local, ray://HEAD:10001 (Ray Client) or HEAD:6379 (the head node)")


#: An executor as the API takes it: ``"local"``, ``"ray"`` (a default :class:`Ray`) or a Ray.
ExecutorLike = str | Ray


def resolve_executor(executor: ExecutorLike) -> Ray | None:
    """The :class:`Ray` settings of ``executor``, or None for the local executor; an
    unknown name is a ConfigError listing the known ones."""
    if isinstance(executor, Ray):
        return executor
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    return Ray() if executor == "ray" else None


def executor_name(executor: ExecutorLike) -> str:
    """``"local"`` or ``"ray"``."""
    return "local" if resolve_executor(executor) is None else "ray"
