"""Notes for the user: one plain line each, from library code that must not print.

A note goes to the ``tttembed.notes`` logger at WARNING. With no logging set up (a
script, a notebook), Python's last-resort handler prints it as the bare message on
stderr: one plain line, no source path, no ``Category:`` prefix (what
``warnings.warn`` would print). The CLI collects them while a command runs and prints
each distinct one once at its end (:func:`tttembed.cli._errors.summarised_warnings`).
A script that configures logging gets them through its own handlers.
"""

from __future__ import annotations

import logging

#: The logger every note goes through.
NOTES = "tttembed.notes"


def note(message: str) -> None:
    """Tell the user ``message`` (one line) through the notes logger."""
    logging.getLogger(NOTES).warning(message)


__all__ = ["NOTES", "note"]
