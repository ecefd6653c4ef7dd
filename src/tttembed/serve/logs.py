"""The service's loggers: ``tttembed.serve`` (events) and ``tttembed.serve.access`` (one
JSON line per request), to stderr."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("tttembed.serve")
access_log = logging.getLogger("tttembed.serve.access")


def configure_logging(level: str = "info") -> None:
    """Our loggers to stderr, one line each (access lines are JSON)."""
    logger = logging.getLogger("tttembed.serve")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())
