"""The offline demo dataset: Python standard-library docstrings plus hand-written questions.

The corpus is built on the fly from the docstrings of the Python installation that runs
it (``importlib`` + ``inspect``), so nothing is downloaded and nothing large is shipped.
The questions (``demo/queries.jsonl``) and graded labels (``demo/qrels.tsv``) are
the project's own. Docstrings and APIs differ a little across Python versions, so
``demo_qrels(corpus_ids)`` drops labels whose document this Python lacks, and says how many.

Document ids are qualified names: ``json`` (the module), ``json.dumps`` (a function),
``collections.OrderedDict`` (a class), ``collections.OrderedDict.move_to_end`` (a method).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import warnings
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from importlib.resources import files
from types import ModuleType
from typing import Any

from tttembed.core.errors import DataError
from tttembed.data.beir import Task

#: Commonly available, import-safe standard-library modules (no GUI, no side effects).
DEMO_MODULES: tuple[str, ...] = (
    "abc", "argparse", "array", "asyncio", "base64", "bisect", "builtins", "calendar", "cmath",
    "codecs", "collections", "concurrent.futures", "configparser", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum",
    "filecmp", "fnmatch", "fractions", "functools", "getpass", "gettext", "glob", "gzip",
    "hashlib", "heapq", "hmac", "html", "http.client", "inspect", "io", "ipaddress",
    "itertools", "json", "locale", "logging", "math", "mimetypes", "numbers", "operator",
    "os", "os.path", "pathlib", "pickle", "platform", "pprint", "queue", "random", "re",
    "sched", "secrets", "select", "shlex", "shutil", "signal", "smtplib", "socket",
    "sqlite3", "statistics", "string", "struct", "subprocess", "sysconfig", "tarfile",
    "tempfile", "textwrap", "threading", "time", "timeit", "traceback", "typing",
    "unicodedata", "unittest", "urllib.parse", "urllib.request", "uuid", "warnings",
    "weakref", "xml.etree.ElementTree", "zipfile", "zlib",
)

#: A docstring shorter than this (after ``inspect.cleandoc``) is not a document.
MIN_DOC_CHARS = 40
#: Longer docstrings are cut at a word boundary near this many characters.
MAX_TEXT_CHARS = 2000
#: Signatures longer than this are cut in the title.
MAX_SIGNATURE_CHARS = 100

#: Implementation modules whose objects a public module re-exports as its own API.
_OWNER_ALIASES: dict[str, tuple[str, ...]] = {
    "os": ("posix", "nt"),
    "os.path": ("genericpath",),
    "threading": ("_thread",),
}

_DATA_PACKAGE = "tttembed.demo"
QUERIES_FILE = "queries.jsonl"
QRELS_FILE = "qrels.tsv"
QRELS_HEADER = ("query-id", "corpus-id", "score")
GRADES = frozenset({1, 2})


# ------------------------------------------------------------------------------ corpus


def stdlib_corpus(modules: Sequence[str] = DEMO_MODULES) -> dict[str, dict[str, str]]:
    """A BEIR corpus ``{id: {"title", "text"}}`` of stdlib docstrings, ids sorted.

    Modules that fail to import are skipped. Each module gives its own docstring and those
    of its public functions, classes and the methods of those classes that it defines
    (re-exports from other modules are left to their owner), when the cleaned docstring
    has at least ``MIN_DOC_CHARS`` characters.
    """
    docs: dict[str, tuple[str, str]] = {}
    seen: dict[int, object] = {}  # id -> object, held so that ids are not reused
    for name in sorted(set(modules)):
        module = _import_quietly(name)
        if module is None:
            continue
        for doc_id, obj, signature_of in _module_entries(name, module):
            # A bound method (random.choice) is the same document as its function.
            key = getattr(obj, "__func__", obj)
            if doc_id in docs or id(key) in seen:
                continue
            text = _clean_doc(obj)
            if text is None:
                continue
            seen[id(key)] = key
            docs[doc_id] = (_title(doc_id, signature_of), text)
    return {doc_id: {"title": docs[doc_id][0], "text": docs[doc_id][1]}
            for doc_id in sorted(docs)}


def _import_quietly(name: str) -> ModuleType | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this Python lacks is skipped
            return None


def _owns(name: str, module: ModuleType, obj: object) -> bool:
    """Whether ``obj`` belongs to module ``name`` rather than being imported from elsewhere."""
    owner = getattr(obj, "__module__", None)
    if not isinstance(owner, str):
        return False
    real = module.__name__
    if owner == real or owner.startswith(real + "."):
        return True  # a package's own submodules (asyncio.tasks for asyncio)
    base = real.rpartition(".")[2]
    if owner == "_" + base:
        return True  # the C accelerator (_heapq for heapq, _csv for csv)
    return owner in _OWNER_ALIASES.get(name, ())  # os.path is posixpath or ntpath


def _module_entries(name: str, module: ModuleType) -> Iterator[tuple[str, object, object]]:
    """(doc id, object whose docstring is the text, callable for the signature or None).

    Module-level names come before class methods, so that where both exist the same
    function keeps its module-level id (``random.choice``, not ``random.Random.choice``).
    """
    yield name, module, None
    classes: list[tuple[str, type]] = []
    for attr, obj in _public_members(_module_namespace(module), getattr(module, "__all__", ())):
        if not (inspect.isclass(obj) or inspect.isroutine(obj)) or not _owns(name, module, obj):
            continue
        yield f"{name}.{attr}", obj, obj
        if inspect.isclass(obj):
            classes.append((f"{name}.{attr}", obj))
    for qual, cls in classes:
        for meth_name, raw in _public_members(vars(cls), ()):  # type: ignore[arg-type]
            func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
            if inspect.isroutine(func) and _defined_in(cls, func):
                yield f"{qual}.{meth_name}", func, func


def _module_namespace(module: ModuleType) -> dict[str, Any]:
    """Public names of a module, including those it loads lazily (concurrent.futures)."""
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for attr in dir(module):
            if attr.startswith("_"):
                continue
            try:
                namespace[attr] = getattr(module, attr)
            except Exception:  # noqa: BLE001, S112 - a lazy attribute that fails is skipped
                continue
    return namespace


def _defined_in(cls: type, func: object) -> bool:
    """A method written for this class, not a function borrowed from elsewhere."""
    if getattr(func, "__objclass__", None) is cls:
        return True  # a method of a C type (str.join)
    qualname = getattr(func, "__qualname__", "")
    if isinstance(qualname, str) and qualname.startswith(cls.__qualname__ + "."):
        return True
    # A function of the class's own module assigned in its body counts; a borrowed one
    # (time.localtime as logging.Formatter.converter) is left to its own module.
    return getattr(func, "__module__", None) == cls.__module__


def _public_members(namespace: dict[str, Any], exported: Sequence[str]) -> list[tuple[str, Any]]:
    """Public names, sorted; an object bound to several names is kept under one of them:
    a name in ``__all__`` first, then the object's own ``__name__``, then the first name."""
    items = sorted(((k, v) for k, v in namespace.items() if not k.startswith("_")),
                   key=lambda item: item[0])
    exported_set = set(exported)

    def rank(key: str, value: Any) -> int:
        return (0 if key in exported_set else 2) + (0 if getattr(value, "__name__", None) == key
                                                   else 1)

    canonical: dict[int, str] = {}
    for key, value in items:
        best = canonical.get(id(value))
        if best is None or rank(key, value) < rank(best, value):
            canonical[id(value)] = key
    return [(k, v) for k, v in items if canonical[id(v)] == k]


def _clean_doc(obj: object) -> str | None:
    # The object's own docstring: inspect.getdoc would inherit a parent's and duplicate it.
    raw = getattr(obj, "__doc__", None)
    if raw is None and inspect.isclass(obj):  # a class documented in its own __init__
        init = vars(obj).get("__init__")
        raw = init.__doc__ if inspect.isfunction(init) else None
    if not isinstance(raw, str):
        return None
    text = inspect.cleandoc(raw).strip()
    if len(text) < MIN_DOC_CHARS:
        return None
    if len(text) > MAX_TEXT_CHARS:
        cut = text.rfind(" ", 0, MAX_TEXT_CHARS)
        text = text[: cut if cut > MAX_TEXT_CHARS // 2 else MAX_TEXT_CHARS].rstrip() + " ..."
    return text


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=[>;])")


def _title(doc_id: str, signature_of: object) -> str:
    if signature_of is None:
        return doc_id
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            signature = str(inspect.signature(signature_of))  # type: ignore[arg-type]
            # default values such as sentinels print their memory address: drop it, so
            # the text (and its embedding-cache key) is the same in every process
            signature = _ADDRESS.sub("", signature)
    except (TypeError, ValueError):
        return doc_id
    if len(signature) > MAX_SIGNATURE_CHARS:  # cut at a parameter boundary
        cut = signature.rfind(", ", 0, MAX_SIGNATURE_CHARS - 5)
        signature = (signature[:cut] if cut > 0 else signature[: MAX_SIGNATURE_CHARS - 5]) \
            + ", ...)"
    return doc_id + signature


# ------------------------------------------------------------------------- shipped files


@dataclass(frozen=True)
class DemoQrels:
    """Graded labels after dropping those whose document this Python lacks."""

    qrels: dict[str, dict[str, int]]
    dropped_labels: int
    dropped_queries: tuple[str, ...]


def _read_shipped(name: str) -> tuple[str, str]:
    resource = files(_DATA_PACKAGE) / name
    try:
        return str(resource), resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("demo data file is missing", path=str(resource),
                        fix="reinstall tttembed") from None


def parse_queries(text: str, path: str = QUERIES_FILE) -> dict[str, str]:
    """Parse queries JSONL (one ``{"_id", "text"}`` object a line) into ``{id: text}``."""
    queries: dict[str, str] = {}
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON: {exc.msg}", path=path, line=line_no,
                            fix="write one JSON object per line") from None
        qid = record.get("_id") if isinstance(record, dict) else None
        qtext = record.get("text") if isinstance(record, dict) else None
        if not isinstance(qid, str) or not qid.strip() or not isinstance(qtext, str) \
                or not qtext.strip():
            raise DataError("expected an object with non-empty string fields _id and text",
                            path=path, line=line_no, fix='write {"_id": ..., "text": ...}')
        if qid in queries:
            raise DataError(f"duplicate query id {qid!r}", path=path, line=line_no,
                            fix="give every query its own id")
        queries[qid] = qtext
    return queries


def parse_qrels(text: str, path: str = QRELS_FILE) -> dict[str, dict[str, int]]:
    """Parse a graded qrels TSV (header ``query-id corpus-id score``, grades 1 or 2)."""
    lines = text.split("\n")
    if tuple(lines[0].rstrip("\r").split("\t")) != QRELS_HEADER:
        raise DataError("bad header", path=path, line=1,
                        fix="the first line must be: query-id<TAB>corpus-id<TAB>score")
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) != 3 or not all(row) or row[2] not in {str(g) for g in GRADES}:
            raise DataError(f"expected query-id, corpus-id and a grade in {sorted(GRADES)}",
                            path=path, line=line_no, fix="write three tab-separated fields")
        qid, did, grade = row[0], row[1], int(row[2])
        if did in qrels.get(qid, {}):
            raise DataError(f"duplicate label {qid} {did}", path=path, line=line_no,
                            fix="label each pair once")
        qrels.setdefault(qid, {})[did] = grade
    return qrels


def filter_qrels(qrels: dict[str, dict[str, int]], corpus_ids: Collection[str]) -> DemoQrels:
    """Keep labels whose document is in ``corpus_ids``, and queries with a grade-2 label.

    ``dropped_labels`` counts the labels removed, including the remaining labels of a
    dropped query. The input is not modified.
    """
    ids = corpus_ids if isinstance(corpus_ids, (set, frozenset, dict)) else set(corpus_ids)
    kept: dict[str, dict[str, int]] = {}
    dropped_labels = 0
    dropped_queries: list[str] = []
    for qid, labels in qrels.items():
        present = {did: g for did, g in labels.items() if did in ids}
        if any(g == 2 for g in present.values()):
            kept[qid] = present
            dropped_labels += len(labels) - len(present)
        else:
            dropped_labels += len(labels)
            dropped_queries.append(qid)
    return DemoQrels(kept, dropped_labels, tuple(dropped_queries))


def demo_queries() -> dict[str, str]:
    """The shipped questions ``{query id: text}``, in file order."""
    return parse_queries(*reversed(_read_shipped(QUERIES_FILE)))


def demo_qrels(corpus_ids: Collection[str] | None = None) -> DemoQrels:
    """The shipped graded labels (2 answers the question, 1 is related).

    With ``corpus_ids`` (e.g. the corpus dict), labels pointing at documents this Python's
    standard library lacks are dropped, and so is a query left without a grade-2 label.
    """
    qrels = parse_qrels(*reversed(_read_shipped(QRELS_FILE)))
    if corpus_ids is None:
        return DemoQrels(qrels, 0, ())
    return filter_qrels(qrels, corpus_ids)


def demo_task(modules: Sequence[str] = DEMO_MODULES) -> Task:
    """Build the corpus on this Python and keep the questions it can answer."""
    corpus = stdlib_corpus(modules)
    labels = demo_qrels(corpus)
    queries = {qid: q for qid, q in demo_queries().items() if qid in labels.qrels}
    return Task("stdlib-docs", None, corpus, queries, labels.qrels, "test",
                source="python-stdlib-docstrings", dropped_labels=labels.dropped_labels,
                dropped_queries=labels.dropped_queries)
