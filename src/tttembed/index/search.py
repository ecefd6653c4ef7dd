"""Raw search: encode queries in batches, search the index, return BEIR runs.

``SearchResult`` keeps FAISS's arrays (``scores``, ``rows`` of shape (nq, k)) next to the
query ids, so later stages (reward allocation, adaptation) work on arrays; ``to_run``
turns it into the BEIR dict ``{qid: {doc_id: score}}`` at the edge.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tttembed.core.errors import ConfigError, DataError
from tttembed.core.io import atomic_file, refuse_existing
from tttembed.core.progress import Advance
from tttembed.embed.base import Embedder
from tttembed.index.base import Index
from tttembed.types import PathLike, Qrels

RUN_FORMATS = ("trec", "jsonl")


@dataclass(frozen=True)
class SearchResult:
    """Search arrays of shape (nq, k) beside the query ids (and their tasks); ``qrels``
    holds the judgments that came with the queries (``{task: qrels}``), ``applied`` maps
    each adapted state to the number of queries it was applied to, ``leaked`` each state
    learned from judgments to the number of judged queries here whose own judgments
    rewarded it (metrics on them are not a held-out result), ``identical`` the tasks
    whose lists leave out the document whose id is the query id."""

    qids: list[str]
    scores: np.ndarray  # (nq, k) float32
    rows: np.ndarray  # (nq, k) int64 row ids into index.doc_ids; -1 = none
    doc_ids: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    qrels: dict[str, Qrels] = field(default_factory=dict, repr=False)
    applied: dict[Any, int] = field(default_factory=dict)
    leaked: dict[Any, int] = field(default_factory=dict)
    #: ``{task: [qid, ...]}``: the judged queries whose own judgments rewarded a state.
    leak_qids: dict[str, list[str]] = field(default_factory=dict)
    #: Tasks whose lists leave out the query's own document (``ignore_identical_ids``).
    identical: list[str] = field(default_factory=list)
    #: ``{task: "on (why)" | "off (why)"}``: where each task's rule came from.
    identical_why: dict[str, str] = field(default_factory=dict)

    def _task(self, i: int) -> str:
        return self.tasks[i] if self.tasks else ""

    def to_run(self) -> dict[str, dict[str, float]]:
        """The BEIR run ``{qid: {doc_id: score}}`` (every task's queries together)."""
        run: dict[str, dict[str, float]] = {}
        for i, qid in enumerate(self.qids):
            run[qid] = {self.doc_ids[r]: float(s)
                        for r, s in zip(self.rows[i], self.scores[i]) if r >= 0}
        return run

    def runs(self) -> dict[str, dict[str, dict[str, float]]]:
        """One BEIR run per task: ``{task: {qid: {doc_id: score}}}``."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for i, qid in enumerate(self.qids):
            out.setdefault(self._task(i), {})[qid] = {
                self.doc_ids[r]: float(s) for r, s in zip(self.rows[i], self.scores[i]) if r >= 0}
        return out

    @classmethod
    def from_runs(cls, runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                  tasks: Sequence[str], qids: Sequence[str], doc_ids: list[str], k: int,
                  **fields: Any) -> SearchResult:
        """Arrays from per-task runs (each query's top ``k`` by score, ties by doc id as
        trec_eval reads them); queries in the order of ``tasks``/``qids``."""
        row_of = {d: r for r, d in enumerate(doc_ids)}
        scores = np.full((len(qids), k), -np.inf, np.float32)
        rows = np.full((len(qids), k), -1, np.int64)
        for i, (task, qid) in enumerate(zip(tasks, qids)):
            ranked = sorted(sorted(runs[task][qid].items(), key=lambda kv: kv[0], reverse=True),
                            key=lambda kv: -kv[1])[:k]
            for j, (did, s) in enumerate(ranked):
                scores[i, j], rows[i, j] = s, row_of[did]
        return cls(list(qids), scores, rows, doc_ids, tasks=list(tasks), **fields)


def encode_queries(embedder: Embedder, texts: list[str], batch_size: int = 256,
                   progress: Advance | None = None) -> np.ndarray:
    """Encode query texts in batches (each batch goes through the embedder's cache)."""
    if not texts:
        return np.zeros((0, int(embedder.dim)), dtype=np.float32)
    out = []
    for start in range(0, len(texts), batch_size):
        out.append(embedder.encode(texts[start:start + batch_size], "query"))
        if progress is not None:
            progress(min(batch_size, len(texts) - start))
    return np.concatenate(out, axis=0).astype(np.float32, copy=False)


def search_excluding(index: Index, vectors: np.ndarray, k: int,
                     exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``index.search(vectors, k)``, where ``exclude[i]`` (a row id, -1 = none) is left out
    of query i's list: BEIR's ``ignore_identical_ids`` (the query's own document). The
    index is searched one deeper and each list keeps its order; with nothing to exclude
    it is exactly ``index.search``."""
    if exclude is None or not bool(np.any(exclude >= 0)):
        return index.search(vectors, k)
    scores, rows = index.search(vectors, min(k + 1, len(index)))
    hit = rows == np.asarray(exclude, dtype=np.int64)[:, None]
    order = np.argsort(hit, axis=1, kind="stable")  # kept rows first, in their order
    rows = np.take_along_axis(rows, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    rows[np.take_along_axis(hit, order, axis=1)] = -1
    scores[rows < 0] = -np.inf
    return scores[:, :k], rows[:, :k]


def identical_rows(index: Index, qids: Sequence[str],
                   wanted: Sequence[bool] | None = None) -> np.ndarray:
    """Per query id, the row of the document with the same id in ``index`` (-1 = none,
    or where ``wanted`` is False)."""
    row_of = {d: r for r, d in enumerate(index.doc_ids)}
    want = [True] * len(qids) if wanted is None else wanted
    return np.array([row_of.get(q, -1) if w else -1 for q, w in zip(qids, want)],
                    dtype=np.int64)


def search_vectors(index: Index, qids: list[str], vectors: np.ndarray, k: int,
                   batch_size: int = 4096) -> SearchResult:
    if k < 1:
        raise ConfigError(f"top-k must be >= 1, got {k}")
    t0 = time.perf_counter()
    scores, rows = [], []
    for start in range(0, len(qids), batch_size):
        d, i = index.search(vectors[start:start + batch_size], k)
        scores.append(d)
        rows.append(i)
    k_eff = min(k, len(index))
    d_all = np.concatenate(scores) if scores else np.zeros((0, k_eff), np.float32)
    i_all = np.concatenate(rows) if rows else np.zeros((0, k_eff), np.int64)
    return SearchResult(qids=list(qids), scores=d_all, rows=i_all, doc_ids=index.doc_ids,
                        timings={"search_s": time.perf_counter() - t0})


def encode_and_search(index: Index, queries: Mapping[str, str], embedder: Embedder,
                      k: int = 100, batch_size: int = 256,
                      progress: Advance | None = None) -> SearchResult:
    """Encode ``queries`` ({qid: text}) and search the index; timings split encode/search."""
    qids = list(queries)
    t0 = time.perf_counter()
    vectors = encode_queries(embedder, [queries[q] for q in qids], batch_size, progress)
    encode_s = time.perf_counter() - t0
    result = search_vectors(index, qids, vectors, k)
    result.timings["encode_s"] = encode_s
    return result


def write_run(run: Mapping[str, Mapping[str, float]], path: PathLike,
              fmt: str | None = None, tag: str = "tttembed", *, overwrite: bool = True) -> Path:
    """Write a run as TREC (``qid Q0 doc rank score tag``) or JSONL, atomically; with
    ``overwrite=False`` an existing file is an error. Scores are written at full float
    precision (the shortest text that reads back as the same number), so that trec_eval
    and pytrec_eval break ties as the console's metrics do."""
    path = refuse_existing(path, overwrite, "run file")
    fmt = fmt or ("jsonl" if path.suffix in (".jsonl", ".json") else "trec")
    if fmt not in RUN_FORMATS:
        raise ConfigError(f"unknown run format {fmt!r}; known: {', '.join(RUN_FORMATS)}")
    with atomic_file(path, "w") as fh:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda kv: -kv[1])
            if fmt == "trec":
                for rank, (did, score) in enumerate(ranked, 1):
                    fh.write(f"{qid} Q0 {did} {rank} {float(score)!r} {tag}\n")
            else:
                fh.write(json.dumps({"query_id": qid, "results": [
                    {"doc_id": did, "rank": r, "score": float(s)}
                    for r, (did, s) in enumerate(ranked, 1)]}, ensure_ascii=False) + "\n")
    return path


def _utf8_lines(path: Path) -> Iterator[str]:
    """The lines of a text file as UTF-8; a line that is not UTF-8 is a DataError naming
    the file, the line and the byte."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                                f"{exc.start + 1})", path=path, line=n,
                                fix="save the file as UTF-8, or give a run tttembed wrote"
                                ) from None


def read_run(path: PathLike) -> dict[str, dict[str, float]]:
    """Read a run (TREC ``qid Q0 doc rank score tag`` or our JSONL); a line that is neither
    is a DataError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError("run file not found", path=path,
                        fix="give a run written by `tttembed search --out` or trec_eval's format")
    run: dict[str, dict[str, float]] = {}
    jsonl = path.suffix in (".jsonl", ".json")
    for n, line in enumerate(_utf8_lines(path), 1):
        if not line.strip():
            continue
        try:
            if jsonl:
                rec = json.loads(line)
                run[str(rec["query_id"])] = {str(r["doc_id"]): float(r["score"])
                                             for r in rec["results"]}
            else:
                qid, _, did, _, score, *_ = line.split()
                run.setdefault(qid, {})[did] = float(score)
        except (ValueError, KeyError, TypeError) as exc:
            form = ("a JSON object with query_id and results [{doc_id, score}]" if jsonl
                    else "qid Q0 doc rank score tag")
            raise DataError(f"not a run line ({type(exc).__name__}); expected {form}",
                            path=path, line=n) from None
    return run
