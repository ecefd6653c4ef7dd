"""BEIR-layout folders: corpus.jsonl, queries.jsonl, qrels/<split>.tsv, with strict checks.

A folder looks like::

    <name>/corpus.jsonl      {"_id", "title", "text"} per line (title optional)
    <name>/queries.jsonl     {"_id", "text"} per line, all splits together
    <name>/qrels/<split>.tsv query-id<TAB>corpus-id<TAB>score (integer grade), header optional

Every problem is a DataError with the file, the 1-based line and how to fix it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tttembed.core.errors import DataError
from tttembed.core.io import read_json
from tttembed.data.jsonl import duplicate, get_id, get_str, iter_objects, read_lines, shown

LAYOUT = ("a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv "
          "(query-id<TAB>corpus-id<TAB>score)")
_QID_HEADERS = frozenset({"query-id", "query_id", "qid", "query", "query-ids"})
_FINGERPRINT_VERSION = b"tttembed-corpus-v1\n"


@dataclass(frozen=True)
class Task:
    """One retrieval task, the one task type of the project (BEIR folders, evaluation
    tasks, MTEB tasks, the demo): a corpus, the queries of one split and their judgments;
    optionally a second split whose judged queries may be used to *learn* (``train_*``),
    and the judgments dropped at load because their query or document is absent."""

    name: str
    root: Path | None
    corpus: dict[str, dict[str, str]] = field(repr=False)
    queries: dict[str, str] = field(repr=False)
    qrels: dict[str, dict[str, int]] = field(repr=False)
    split: str | None
    source: str = ""  # where it came from: a folder, mteb:NAME, the stdlib docstrings
    train_queries: dict[str, str] = field(default_factory=dict, repr=False)
    train_qrels: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    train_split: str | None = None
    dropped_labels: int = 0
    dropped_queries: tuple[str, ...] = ()
    #: BEIR's ``ignore_identical_ids``: a retrieved document whose id equals the query id
    #: is dropped from every ranking (:func:`identical_ids_rule`).
    ignore_identical_ids: bool = False

    @cached_property
    def fingerprint(self) -> str:
        """corpus_fingerprint(self.corpus), computed once."""
        return corpus_fingerprint(self.corpus)

    @property
    def n_judged(self) -> int:
        """Queries with at least one relevant (grade >= 1) judgment."""
        return sum(1 for g in self.qrels.values() if any(v >= 1 for v in g.values()))


def doc_text(doc: Mapping[str, str]) -> str:
    """The text that gets embedded and scored: title and text joined by a space."""
    return (doc.get("title", "") + " " + doc["text"]).strip()


def corpus_fingerprint(corpus: Mapping[str, Mapping[str, str]]) -> str:
    """sha256 hex over the documents sorted by id; independent of file and dict order."""
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    for doc_id in sorted(corpus):
        doc = corpus[doc_id]
        title = doc.get("title", "")
        text = doc["text"]
        # Length prefixes keep (id, title, text) boundaries unambiguous.
        digest.update(f"{len(doc_id)}:{len(title)}:{len(text)}:".encode())
        digest.update((doc_id + title + text).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def load_corpus(path: str | Path, *, allow_empty: bool = True) -> dict[str, dict[str, str]]:
    """corpus.jsonl -> {doc_id: {"title", "text"}} in file order.

    "text" is required (it may be empty when the title is not); "title" may be missing.
    A document whose title and text are both empty is kept when allow_empty (real
    collections have them: Cranfield 471 and 995, one of them judged), an error otherwise;
    a corpus in which every document is empty is always an error.
    """
    path = Path(path)
    corpus: dict[str, dict[str, str]] = {}
    lines: dict[str, int] = {}
    empty = 0
    for line, obj in iter_objects(path, what="documents",
                                  missing_fix=f"expected a corpus file; {LAYOUT}"):
        doc_id = get_id(obj, "_id", path, line)
        title = get_str(obj, "title", path, line, required=False)
        text = get_str(obj, "text", path, line)
        if doc_id in lines:
            raise duplicate("document _id", doc_id, lines[doc_id], path, line)
        if not text.strip() and not title.strip():
            if not allow_empty:
                raise DataError(f"document {shown(doc_id)} has an empty title and text",
                                path=path, line=line,
                                fix="give it a non-empty 'text' or remove the line")
            empty += 1
        lines[doc_id] = line
        corpus[doc_id] = {"title": title, "text": text}
    if empty == len(corpus):
        raise DataError("every document has an empty title and text", path=path,
                        fix="put the document text in the 'text' field")
    return corpus


def load_beir_queries(path: str | Path) -> dict[str, str]:
    """queries.jsonl -> {query_id: text} in file order; empty text is an error."""
    path = Path(path)
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for line, obj in iter_objects(path, what="queries",
                                  missing_fix=f"expected a queries file; {LAYOUT}"):
        qid = get_id(obj, "_id", path, line)
        text = get_str(obj, "text", path, line, nonempty=True)
        if qid in lines:
            raise duplicate("query _id", qid, lines[qid], path, line)
        lines[qid] = line
        queries[qid] = text
    return queries


def load_judgments(path: str | Path) -> dict[str, dict[str, int]]:
    """Judgments in BEIR's qrels TSV (``query-id corpus-id score``, tab-separated) or
    TREC's qrels (``qid iteration doc grade``, whitespace-separated), told apart by the
    first line that is not a header."""
    path = Path(path)
    rows = read_lines(path, missing_fix=f"expected a judgments file; {LAYOUT}")
    first = next((raw for _, raw in rows if raw.strip()), "")
    if len(first.split("\t")) == 3 or len(first.split()) != 4:
        return load_qrels(path)
    qrels: dict[str, dict[str, int]] = {}
    for line, raw in rows:
        cols = raw.split()
        if len(cols) != 4 or not _is_int(cols[3]):
            raise DataError(f"expected a TREC qrels line 'qid iteration doc grade', found "
                            f"{shown(raw.strip())}", path=path, line=line,
                            fix="one judgment per line, four fields, an integer grade")
        qrels.setdefault(cols[0], {})[cols[2]] = int(cols[3])
    return qrels


def load_qrels(path: str | Path, *, corpus_ids: Collection[str] | None = None,
               query_ids: Collection[str] | None = None) -> dict[str, dict[str, int]]:
    """qrels/<split>.tsv -> {qid: {doc_id: grade}}; ids are checked when given."""
    path = Path(path)
    rows = read_lines(path, missing_fix=f"expected a judgments file; {LAYOUT}")
    qrels: dict[str, dict[str, int]] = {}
    for index, (line, raw) in enumerate(rows):
        cols = raw.split("\t")
        if len(cols) != 3:
            raise DataError(f"expected 3 tab-separated columns (query-id, corpus-id, score), "
                            f"found {len(cols)}", path=path, line=line, fix=_columns_fix(cols))
        qid, doc_id, grade_text = cols[0].strip(), cols[1].strip(), cols[2].strip()
        if index == 0 and qid.lower() in _QID_HEADERS and not _is_int(grade_text):
            continue  # header line
        if not qid or not doc_id:
            raise DataError("empty query-id or corpus-id", path=path, line=line,
                            fix="fill both id columns")
        if not _is_int(grade_text):
            raise DataError(f"score {shown(grade_text)} is not an integer", path=path,
                            line=line, fix="write integer relevance grades such as 0, 1, 2")
        if query_ids is not None and qid not in query_ids:
            raise DataError(f"unknown query-id {shown(qid)}", path=path, line=line,
                            fix="add the query to queries.jsonl or remove the line")
        if corpus_ids is not None and doc_id not in corpus_ids:
            raise DataError(f"unknown corpus-id {shown(doc_id)}", path=path, line=line,
                            fix="add the document to corpus.jsonl or remove the line")
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            first = _first_line(rows, qid, doc_id)
            raise DataError(f"duplicate judgment ({shown(qid)}, {shown(doc_id)}) "
                            f"(first on line {first})", path=path, line=line,
                            fix="keep one line per query-id and corpus-id")
        judged[doc_id] = int(grade_text)
    if not qrels:
        raise DataError("empty file: no judgments", path=path,
                        fix="write query-id<TAB>corpus-id<TAB>score lines")
    return qrels


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit()


def _columns_fix(cols: list[str]) -> str:
    if len(cols) == 1 and len(cols[0].split()) >= 3:
        return "separate the columns with tabs, not spaces"
    if len(cols) == 4:
        return "TREC 'qid 0 docid grade' lines must become query-id<TAB>corpus-id<TAB>score"
    return "write query-id<TAB>corpus-id<TAB>score"


#: Tasks whose benchmark drops a retrieved document whose id is the query's own id (MTEB's
#: per-task ``ignore_identical_ids``: every ArguAna query argument is also in the corpus,
#: Quora's questions are their own duplicates). Lower-case folder or task names.
IDENTICAL_IDS_TASKS = frozenset({"arguana", "quora"})
#: The optional settings file of a BEIR folder: ``{"ignore_identical_ids": true}``.
TASK_SETTINGS = "tttembed-task.json"


def identical_ids_rule(root: Path | None, name: str) -> tuple[bool, str]:
    """Whether a task drops retrieved documents whose id equals the query id, and why:
    the folder's ``tttembed-task.json`` says so, else the benchmark's own setting for a
    task of that name (ArguAna, Quora), else off."""
    if root is not None and (root / TASK_SETTINGS).is_file():
        got = read_json(root / TASK_SETTINGS, what="task settings")
        value = got.get("ignore_identical_ids") if isinstance(got, dict) else None
        if not isinstance(value, bool):
            raise DataError("ignore_identical_ids must be true or false",
                            path=root / TASK_SETTINGS,
                            fix='write {"ignore_identical_ids": true} (or false)')
        return value, TASK_SETTINGS
    key = name.lower()
    if key in IDENTICAL_IDS_TASKS:
        return True, f"the benchmark's setting for {name}"
    return False, "off"


def _first_line(rows: list[tuple[int, str]], qid: str, doc_id: str) -> int:
    for line, raw in rows:
        cols = raw.split("\t")
        if cols[0].strip() == qid and cols[1].strip() == doc_id:
            return line
    raise AssertionError("unreachable: duplicate without a first occurrence")


def load_task(path: str | Path, split: str | None = "test", name: str | None = None) -> Task:
    """A BEIR folder as a Task.

    split=None, or a folder without qrels/: all queries and no judgments (Task.split is
    None). Otherwise the queries that appear in qrels/<split>.tsv, in queries.jsonl order;
    a split without its qrels file is an error listing the available splits.
    """
    root = Path(path)
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is a file, not a folder"
        raise DataError(f"task folder {what}", path=root, fix=LAYOUT)
    corpus = load_corpus(root / "corpus.jsonl")
    all_queries = load_beir_queries(root / "queries.jsonl")
    task_name = name if name is not None else root.resolve().name
    qrels_dir = root / "qrels"
    if split is not None and not qrels_dir.is_dir() and os.path.lexists(qrels_dir):
        why = ("a file, not a folder" if qrels_dir.is_file() else
               "a link that leads nowhere (a broken link, or a loop of links)")
        raise DataError(f"qrels is {why}: the judgments cannot be read", path=qrels_dir,
                        fix="make qrels/ a folder of <split>.tsv files (or remove it to "
                            "search without judgments)")
    identical = identical_ids_rule(root, root.resolve().name)[0]
    if split is None or not qrels_dir.is_dir():
        return Task(task_name, root, corpus, all_queries, {}, None,
                    ignore_identical_ids=identical)
    if not split or "/" in split or "\\" in split or split.startswith("."):
        raise DataError(f"bad split name {shown(split)}", path=qrels_dir,
                        fix="use a split name such as 'test'")
    qrels_path = qrels_dir / f"{split}.tsv"
    if not qrels_path.is_file() and os.path.lexists(qrels_path):
        why = ("a folder, not a file" if qrels_path.is_dir() else
               "a link that leads nowhere (a broken link, or a loop of links)")
        raise DataError(f"the judgments of split {split!r} are {why}", path=qrels_path,
                        fix="make it a regular qrels TSV file (or a link to one)")
    if not qrels_path.is_file():
        available = sorted(p.stem for p in qrels_dir.glob("*.tsv") if p.is_file())
        listed = ", ".join(available) if available else "none"
        raise DataError(f"no judgments for split {split!r} (available splits: {listed})",
                        path=qrels_path, fix="choose one of the available splits")
    qrels = load_qrels(qrels_path, corpus_ids=corpus, query_ids=all_queries)
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    return Task(task_name, root, corpus, queries, qrels, split, source=str(root),
                ignore_identical_ids=identical)


def resolve_task_path(name_or_path: str, data_root: str | Path | None = None) -> Path:
    """An existing path as given; else ``<root>/<name>`` with root = ``data_root``, else
    ``$TTTEMBED_DATA``. No other folder is guessed."""
    given = Path(name_or_path)
    if given.exists():
        return given
    root = data_root if data_root is not None else os.environ.get("TTTEMBED_DATA")
    if not root:
        raise DataError(f"no dataset {name_or_path!r}: it is not a path, and no data root is "
                        "set", fix="pass a BEIR folder path, or the folder that holds it with "
                        "--data-root (data_root=) or the TTTEMBED_DATA environment variable")
    candidate = Path(root) / name_or_path
    if candidate.exists():
        return candidate
    raise DataError(f"no dataset {name_or_path!r}; tried: {given}, {candidate}",
                    fix="pass a BEIR folder path, or set --data-root / TTTEMBED_DATA to the "
                    "folder that holds it")
