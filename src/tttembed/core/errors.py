"""One error hierarchy. The CLI maps every TTTEmbedError to exit code 1 and one line."""

from __future__ import annotations


class TTTEmbedError(Exception):
    """Base class: a user-facing problem with a message that says how to fix it."""


class ConfigError(TTTEmbedError):
    """Bad option, spec string or configuration file."""


class DataError(TTTEmbedError):
    """Bad input data. Carries the file and line (1-based) where it was found."""

    def __init__(self, message: str, *, path: object = None, line: int | None = None,
                 fix: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.fix = fix
        where = ""
        if self.path is not None:
            where = self.path + (f":{line}" if line is not None else "") + ": "
        text = where + message
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class MissingDependency(TTTEmbedError):
    """An optional dependency is not installed; the message gives the install command."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{package} is not installed; install it with: pip install 'tttembed[{extra}]'"
        )


class BackendError(TTTEmbedError):
    """A backend (model, HTTP endpoint) failed in a way retries could not fix."""


class StateMismatch(TTTEmbedError):
    """An artifact (index, state file, cache) was made for another embedder or dimension."""

