"""Versioned states on disk: list / show / promote / rollback / diff
(:mod:`tttembed.registry.versions`)."""

from tttembed.registry.versions import Registry, Version, version_number

__all__ = ["Registry", "Version", "version_number"]
