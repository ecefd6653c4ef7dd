"""One entry to the loop's coordination: beside the registry it coordinates around."""

from __future__ import annotations

from pathlib import Path
from typing import Union

from tttembed.core.errors import ConfigError
from tttembed.loop.coordination.base import Coordination
from tttembed.registry.base import StateRegistry

#: A registry object, its folder or its URL.
RegistryRef = Union[str, Path, StateRegistry]


def open_coordination(registry: RegistryRef) -> Coordination:
    """The coordination of ``registry``: rows in its database (on its own connection) for
    a PostgreSQL registry, files in its folder for a folder (a path need not be a
    registry yet: the learner's record of any folder can be read)."""
    from tttembed.registry.postgres import PostgresRegistry, is_url
    from tttembed.registry.versions import Registry

    if isinstance(registry, (str, Path)):
        if not is_url(registry):
            from tttembed.loop.coordination.folder import FolderCoordination

            return FolderCoordination(registry)
        from tttembed.registry.open import open_registry

        registry = open_registry(str(registry))
    if isinstance(registry, PostgresRegistry):
        from tttembed.loop.coordination.postgres import PostgresCoordination

        return PostgresCoordination(registry.db)
    if isinstance(registry, Registry):
        from tttembed.loop.coordination.folder import FolderCoordination

        return FolderCoordination(registry.root)
    raise ConfigError(f"registry {registry.location}: the closed loop coordinates only "
                      "through a folder or a PostgreSQL registry")


__all__ = ["RegistryRef", "open_coordination"]
