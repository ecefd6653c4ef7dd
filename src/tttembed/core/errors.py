"""One error hierarchy. The CLI maps every TTTEmbedError to exit code 1 and one line."""

from __future__ import annotations

from collections.abc import Sequence


class TTTEmbedError(Exception):
    """Base class: a user-facing problem with a message that says how to fix it."""


class ConfigError(TTTEmbedError):
    """Bad option, spec string or configuration file."""


class StoreUnavailable(ConfigError):
    """The feedback store cannot be reached now (its database restarting or down): a retry
    may succeed. A ConfigError, so whatever handles those handles it; a server answers it
    with a 503 and ``Retry-After`` instead of a 500."""


class VersionInUse(ConfigError):
    """A registry version that cannot be dropped now: served, pinned, or the newest (whose
    number the next version would take again). Retention skips it; a user is told why."""


class StoreRefused(TTTEmbedError):
    """The feedback store answered but refused a write (a row over one of its limits, a
    constraint, a full disk): nothing of the call was kept. Not the request's fault and
    not a bug: a server answers it with a 503 and logs the store's reason in one line."""


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



def named(exc: OSError, targets: Sequence[object]) -> OSError:
    """``exc`` itself when it names its file; else the same error naming ``targets`` (a
    full disk under ``np.save``, ``fh.write`` or ``os.pwrite`` says only "No space left on
    device", and a user needs to know which file could not be written)."""
    if exc.filename:
        return exc
    where = str(targets[0]) if len(targets) == 1 else ", ".join(str(t) for t in targets)
    return type(exc)(exc.errno or 0, exc.strerror or str(exc), where)
