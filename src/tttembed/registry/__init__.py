"""Versioned states: list / show / promote / rollback / diff, in a folder
(:mod:`tttembed.registry.versions`) or a PostgreSQL database
(:mod:`tttembed.registry.postgres`), opened by :func:`open_registry`."""

from tttembed.registry.base import StateRegistry, Version, version_number
from tttembed.registry.open import open_registry
from tttembed.registry.versions import Registry

__all__ = ["Registry", "StateRegistry", "Version", "open_registry", "version_number"]
