"""The one home of artifact I/O: atomic files and folders, locks, JSON, manifests.

Every artifact tttembed writes (index folder, state file, run, report, cache entry,
checkpoint) goes through here, so the rule holds everywhere: it is written into a
temporary path beside its destination and moved into place with one ``os.replace`` (or
one pointer switch); a crash or Ctrl-C leaves the old artifact (or nothing), never half of
a new one, and never nothing where an old one was.

- :func:`atomic_file` / :func:`atomic_files`: one file, or several committed together.
- :func:`atomic_directory`: a folder swapped in whole (``renameat2(RENAME_EXCHANGE)``
  where the kernel has it, else two renames that the next writer repairs).
- :func:`versioned_directory`: a folder of versions ``v-<id>/`` and a ``CURRENT`` pointer
  file replaced atomically; readers call :func:`resolve_version` once and read one version.
- :func:`writer_lock`: one writer per artifact (``fcntl.flock`` on ``.<name>.lock`` beside
  it); a second writer gets a ConfigError naming the path. Writers holding the lock clean
  the stale temporary and superseded folders that a killed run left.

Each write passes named crash points (:func:`tttembed.core.faults.fault_point`) that the
fault-injection tests kill the process at.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tttembed.core.errors import ConfigError, DataError, named
from tttembed.core.faults import fault_point
from tttembed.core.locks import lock_path, writer_lock
from tttembed.core.serial import (
    DISTRIBUTIONS,
    clean,
    dumps,
    json_hash,
    now_utc,
    text_digest,
    text_hash,
    versions,
)
from tttembed.types import PathLike

MANIFEST = "manifest.json"


# --- atomic writes ------------------------------------------------------------------------

def _temp_name(path: Path, kind: str = "tmp") -> Path:
    return path.with_name(f".{path.name}.{kind}-{uuid.uuid4().hex[:8]}")


def _only_stale(path: Path) -> bool:
    """True for a folder that holds nothing but temporary leftovers of a killed write."""
    return path.is_dir() and all(p.name.startswith(".tmp-") for p in path.iterdir())


def refuse_existing(path: PathLike, overwrite: bool, what: str = "") -> Path:
    """``path``, or a ConfigError when it exists and ``overwrite`` is false (a folder that
    holds only the temporary leftovers of a killed write counts as absent)."""
    path = Path(path)
    if path.exists() and not overwrite and not _only_stale(path):
        raise ConfigError(f"{what + ' ' if what else ''}{path} already exists; pass "
                          "--overwrite (overwrite=True) to replace it, or choose another path")
    return path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: PathLike, mode: str = "wb") -> Iterator[IO[Any]]:
    """Yield a file open on a temporary sibling of ``path``; on success it replaces
    ``path`` in one rename, on any exception (ENOSPC, Ctrl-C) it is removed and ``path``
    is untouched."""
    with atomic_files(path, mode=mode) as (fh,):
        yield fh


@contextmanager
def atomic_files(*paths: PathLike, mode: str = "wb", sync: bool = True
                 ) -> Iterator[tuple[IO[Any], ...]]:
    """Several files committed together: all are written to temporary siblings and
    synced before the first rename; any exception before leaves none of them new. They
    are renamed in the order given, so the LAST one is the commit point (a SIGKILL between
    the renames can only leave the earlier ones new). ``sync=False`` skips the fsyncs (a
    file that may be lost on power failure, never torn by a crash: a status)."""
    targets = [Path(p) for p in paths]
    temps = [_temp_name(p) for p in targets]
    encoding = None if "b" in mode else "utf-8"
    handles: list[IO[Any]] = []
    try:
        for target, tmp in zip(targets, temps):
            target.parent.mkdir(parents=True, exist_ok=True)
            handles.append(open(tmp, mode, encoding=encoding))
        try:
            yield tuple(handles)
            for fh in handles:
                fh.flush()
                if sync:
                    os.fsync(fh.fileno())
                fh.close()
        except OSError as exc:
            raise named(exc, targets) from exc
        fault_point("file:written", targets[-1])
        for target, tmp in zip(targets, temps):
            os.replace(tmp, target)
            fault_point("file:replaced", target)
        if sync:
            _fsync_dir(targets[-1].parent)
    finally:
        for fh in handles:
            try:  # closing flushes: on a full disk that fails too
                fh.close()
            except OSError:
                pass
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def write_text(path: PathLike, text: str, *, sync: bool = True) -> Path:
    """Write ``text`` (UTF-8) atomically; creates the folder (``sync``: see
    :func:`atomic_files`)."""
    with atomic_files(path, mode="w", sync=sync) as (fh,):
        fh.write(text)
    return Path(path)


def write_bytes(path: PathLike, data: bytes) -> Path:
    with atomic_file(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def _fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` to disk (so a renamed folder is whole after a
    power loss too)."""
    for p in folder.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def move_aside(path: PathLike) -> Path | None:
    """Rename the folder ``path`` to a hidden name beside it (``.NAME.dropped-XXXX``) in
    one step, so no reader ever lists half of it while it is removed: the new path (None
    when ``path`` was gone). The caller removes it (:func:`remove_tree`)."""
    path = Path(path)
    trash = path.with_name(f".{path.name}.dropped-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(path, trash)
    except FileNotFoundError:
        return None
    return trash


def remove_tree(path: PathLike) -> None:
    """Remove a file or folder, whatever is left of it."""
    _remove(Path(path))


def recover_directory(out: PathLike) -> Path:
    """Repair what a killed :func:`atomic_directory` left beside ``out``: when ``out`` is
    missing but its previous version was moved aside, put it back; then remove the stale
    temporary and moved-aside siblings. Takes the writer lock of ``out``."""
    out = Path(out)
    if not out.parent.is_dir():
        return out
    with writer_lock(out):
        olds = sorted(out.parent.glob(f".{out.name}.old-*"), key=lambda p: p.stat().st_mtime)
        if not out.exists() and olds:
            os.replace(olds.pop(), out)
        for stale in [*olds, *out.parent.glob(f".{out.name}.tmp-*")]:
            _remove(stale)
    return out


def _swap_in(tmp: Path, out: Path) -> None:
    """Make ``tmp`` the folder at ``out``; the old ``out`` is removed afterwards."""
    if not out.exists():
        os.replace(tmp, out)
    elif _exchange(tmp, out):
        fault_point("swap:switched", out)
        _remove(tmp)  # now the old version
    else:
        old = _temp_name(out, "old")
        os.replace(out, old)
        try:
            fault_point("swap:moved-aside", out)
            os.replace(tmp, out)
        except BaseException:
            if not out.exists():
                os.replace(old, out)
            raise
        fault_point("swap:switched", out)
        _remove(old)
    _fsync_dir(out.parent)


@contextmanager
def atomic_directory(out: PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``out`` in one step. Holds
    the writer lock of ``out`` (a second writer gets a ConfigError), repairs and cleans what
    a killed earlier write left (:func:`recover_directory`). Any exception, Ctrl-C
    included, removes the temporary folder and leaves ``out`` as it was."""
    out = Path(out)
    with writer_lock(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        recover_directory(out)
        tmp = _temp_name(out)
        tmp.mkdir()
        try:
            yield tmp
            _fsync_tree(tmp)
            fault_point("swap:written", out)
            _swap_in(tmp, out)
        except BaseException:
            _remove(tmp)
            raise


# --- versioned folders --------------------------------------------------------------------

#: The pointer file of a versioned folder: the name of the version readers read.
POINTER = "CURRENT"
_VERSION = re.compile(r"v-\d{8}T\d{6}-[0-9a-f]{8}")


def _pointer(folder: Path) -> str | None:
    """The version named by ``folder/CURRENT`` (None when there is no pointer)."""
    path = folder / POINTER
    try:
        name = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"unreadable version pointer ({exc})", path=path) from exc
    if not _VERSION.fullmatch(name):
        raise DataError(f"corrupt version pointer {name[:40]!r}", path=path,
                        fix="write the artifact again with --overwrite")
    return name


def resolve_version(folder: PathLike) -> Path:
    """The folder to read: ``folder/<CURRENT>`` for a versioned artifact, ``folder`` itself
    for one written before versions existed. Resolve once, then read only from it."""
    folder = Path(folder)
    name = _pointer(folder) if folder.is_dir() else None
    return folder if name is None else folder / name


def _clean_versions(out: Path) -> None:
    """Remove what no reader can reach: temporaries, and (once a pointer exists) every
    entry but the pointer and its version (superseded versions, an old flat layout)."""
    try:
        current = _pointer(out)
    except DataError:
        current = None
    for entry in out.iterdir():
        name = entry.name
        if name == POINTER or name == current:
            continue
        if current is not None or name.startswith((".tmp-", f".{POINTER}.tmp-")) \
                or _VERSION.fullmatch(name):
            _remove(entry)


def _switch(out: Path, tmp: Path, name: str) -> None:
    _fsync_tree(tmp)
    fault_point("version:written", out)
    os.replace(tmp, out / name)
    fault_point("version:renamed", out)
    write_text(out / POINTER, name + "\n")
    fault_point("version:switched", out)


@contextmanager
def versioned_directory(out: PathLike) -> Iterator[Path]:
    """Yield a temporary folder inside ``out``; on success it becomes version
    ``out/v-<id>`` and ``out/CURRENT`` is switched to it in one rename, then superseded
    versions are removed (a reader that resolved an older one re-resolves, see
    :func:`resolve_version`). Holds the writer lock of ``out``. A failure or a kill at any
    point leaves the previous version readable; the next writer removes the leftovers.
    A folder of the old flat layout is replaced the same way."""
    out = Path(out)
    with writer_lock(out):
        if out.exists() and not out.is_dir():
            raise ConfigError(f"{out} is a file, not a folder; remove it or choose another path")
        created = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        _clean_versions(out)
        name = f"v-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        tmp = out / f".tmp-{name}"
        tmp.mkdir()
        try:
            yield tmp
            _switch(out, tmp, name)
        except BaseException:
            _remove(tmp)
            if _pointer(out) != name:
                _remove(out / name)
            if created:
                shutil.rmtree(out, ignore_errors=True)
            raise
        _clean_versions(out)


# --- JSON files -------------------------------------------------------------------------

def write_json(path: PathLike, obj: Any, *, indent: int | None = 2,
               sync: bool = True) -> Path:
    """Atomic JSON write of ``clean(obj)`` with sorted keys (NaN as null)."""
    return write_text(path, dumps(obj, indent) + "\n", sync=sync)


def read_json(path: PathLike, *, what: str = "JSON file",
              fix: str | None = None) -> Any:
    """Parse a JSON file; a missing or corrupt file is a DataError naming the path."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{what} not found", path=path, fix=fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"corrupt {what}: {exc}", path=path, fix=fix) from exc


# --- manifests and versions ---------------------------------------------------------------

def read_manifest(folder: PathLike, *, fmt: str, what: str,
                  fix: str) -> dict[str, Any]:
    """``folder/manifest.json`` of an artifact whose ``format`` must be ``fmt`` (of its
    current version when ``folder`` is versioned: pass a resolved version to read the
    manifest of exactly the version you read the rest from)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{what} {folder} does not exist", fix=fix)
    folder = resolve_version(folder)
    path = folder / MANIFEST
    if not path.exists():
        raise DataError(f"{folder} is not a {what} (no {MANIFEST})", fix=fix)
    manifest = read_json(path, what=f"{what} manifest", fix=fix)
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise DataError(f"not a {what} manifest (format is not {fmt!r})", path=path, fix=fix)
    return manifest


def write_manifest(folder: PathLike, manifest: Mapping[str, Any]) -> Path:
    return write_json(Path(folder) / MANIFEST, manifest)


__all__ = ["DISTRIBUTIONS", "MANIFEST", "POINTER", "atomic_directory", "atomic_file",
           "atomic_files", "clean", "dumps", "json_hash", "lock_path", "now_utc", "read_json",
           "read_manifest", "recover_directory", "refuse_existing", "resolve_version",
           "text_digest", "text_hash", "versioned_directory", "versions", "write_bytes",
           "write_json", "write_manifest", "write_text", "writer_lock"]
