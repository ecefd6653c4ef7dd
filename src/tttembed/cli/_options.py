"""The option scheme, once: every command spells the same thing the same way.

| meaning | spelling |
|---|---|
| data read (BEIR folder, query file, corpus, task name) | positional `DATA...` |
| index folder | `--index`, `-i` |
| reward scorer spec | `--scorer`, `-s` |
| learned state file(s) | `--state` |
| scope(s) | `--scope` |
| budget(s), rewards per query | `--budget`, `-b` |
| results per query (API `k`) | `--top-k`, `-k` |
| output (state, run, index, report folder) | `--out`, `-o` |
| replace an existing output | `--overwrite` |
| embedder spec | `--embedder`, `-e` |
| BEIR split / task names | `--split` / `--task` |
| no progress bars | `--quiet` |
| HTTP backends (openai:, llm:, rerank:) | `--timeout`, `--max-retries`, `--concurrency`, `--rpm` |
| where model work runs (index, learn, eval) | `--executor` (local or ray), `--ray-address`, `--ray-actors`, `--ray-gpus` |

Old spellings stay for one release as hidden aliases (``cli/__init__.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.execute.config import ExecutorLike

QueriesArg = Annotated[list[Path], typer.Argument(metavar="QUERIES",
    help="Query sources, one task each: a BEIR folder (its --split queries; qrels give "
         "metrics), or a query file (.jsonl, .tsv, .txt).", show_default=False)]
IndexOpt = Annotated[Path, typer.Option("--index", "-i", help="Index made by 'tttembed "
                                        "index': a FAISS folder, milvus:URI/COLLECTION or "
                                        "qdrant:URL_OR_PATH/COLLECTION.")]
ScorerOpt = Annotated[str, typer.Option(
    "--scorer", "-s", help="Reward scorer spec: bm25, qrels:PATH, qwen3-reranker:PATH, "
    "cross-encoder:PATH, llm:MODEL@URL, rerank:MODEL@URL (or a third-party scheme).")]
BudgetOpt = Annotated[float, typer.Option("--budget", "-b", min=0, help="Average rewards per "
                                          "query (b): B = round(b x N) scored pairs.")]
DepthOpt = Annotated[int, typer.Option(min=1, help="Candidates per rewarded query before "
                                       "every query is covered.")]
TopKOpt = Annotated[int, typer.Option("--top-k", "-k", min=1, help="Results per query.")]
SplitOpt = Annotated[str, typer.Option(help="Split to read from BEIR folders.")]
TaskOpt = Annotated[Optional[list[str]], typer.Option(
    "--task", help="Task name per query source (default: folder name or file stem); "
    "task-wise states are looked up by it.")]
CorpusOpt = Annotated[Optional[Path], typer.Option(
    help="Corpus the index was built from (BEIR folder or corpus.jsonl); default: the "
    "query folder's, else the one the index manifest names.")]
InstructionOpt = Annotated[Optional[str], typer.Option(
    help="Reranker instruction (qwen3-reranker only).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the reward plan.")]
RankOpt = Annotated[int, typer.Option("--rank", min=1, help="--scope adapter: the rank of each task's query-side map U V^T.")]
LedgerOpt = Annotated[Optional[Path], typer.Option(
    help="Reward ledger (SQLite); default <cache>/ledger.sqlite.")]
CacheOpt = Annotated[Optional[Path], typer.Option(
    help="Cache folder (default $TTTEMBED_CACHE_DIR, else ~/.cache/tttembed).")]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]
EmbedderOpt = Annotated[str, typer.Option("--embedder", "-e", help="Embedder spec, e.g. "
                                          f"{DEFAULT_EMBEDDER} or openai:MODEL@URL.")]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", min=0.001, show_default=False,
    help="Seconds per HTTP request of openai:/llm:/rerank: backends [default: 60]; one request with "
         "all its retries ends within 3 x timeout + 30 s.")]
MaxRetriesOpt = Annotated[Optional[int], typer.Option(
    "--max-retries", min=0, show_default=False,
    help="Retries of a failed HTTP request (429, 5xx, timeout, connection) of "
         "openai:/llm:/rerank: "
         "backends [default: 5].")]
ConcurrencyOpt = Annotated[Optional[int], typer.Option(
    "--concurrency", min=1, show_default=False,
    help="Requests in flight at once to an openai:/llm:/rerank: backend [default: 4 for "
         "openai:/llm:, 8 for rerank:].")]
RpmOpt = Annotated[Optional[float], typer.Option(
    "--rpm", min=0.001, show_default=False,
    help="Requests per minute to an openai:/llm:/rerank: backend, spaced evenly "
         "[default: no limit]; a 429 with Retry-After pauses all requests anyway.")]
ExecutorOpt = Annotated[str, typer.Option(
    "--executor", help="Where model work runs: local (this process) or ray (Ray Data "
    "actors; pip install 'tttembed[ray]'). index: the documents not yet cached; "
    "learn/eval: the pairs of local-model scorers (cross-encoder:, qwen3-reranker:), not "
    "yet in the ledger; HTTP scorers (rerank:, llm:) and qrels are scored in this process, "
    "with a note.")]
RayAddressOpt = Annotated[Optional[str], typer.Option(
    "--ray-address", help="Ray cluster for --executor ray ('auto', 'ray://HEAD:10001'); "
    "default: start a local Ray.")]
RayActorsOpt = Annotated[int, typer.Option(
    "--ray-actors", min=1, help="--executor ray: model replicas (one model load each).")]
RayGpusOpt = Annotated[float, typer.Option(
    "--ray-gpus", min=0, help="--executor ray: GPUs per replica (0: CPU).")]
RetryMissingOpt = Annotated[bool, typer.Option(
    "--retry-missing", help="Ask the scorer again for pairs recorded as missing in the "
    "ledger (e.g. an LLM answer without a score).")]


def ray_executor(executor: str, address: str | None = None, actors: int = 1,
                 gpus: float = 0.0) -> ExecutorLike:
    """``--executor`` with ``--ray-address/--ray-actors/--ray-gpus`` as the API takes it:
    ``"local"`` or a :class:`tttembed.api.Ray`."""
    from tttembed.api import Ray

    return Ray(address=address, actors=actors, gpus=gpus) if executor == "ray" else executor


def _alpha(value: str) -> str:
    from tttembed.adapt.crossval import parse_alpha
    from tttembed.api import ConfigError

    try:
        parse_alpha(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


AlphaOpt = Annotated[str, typer.Option(
    "--alpha", callback=_alpha, help="Magnitude of the learned vectors: rule (n/(n+1), the "
    "default), auto (learn: chosen by the guard, which re-searches held-out queries and "
    "judges the difference, from 0, 0.1, 0.2, 0.3, 0.5, 0.7, rule; 0 when none shows a "
    "gain) or a number in [0, 1].")]
FoldsOpt = Annotated[int, typer.Option(
    "--folds", "--cv-folds", min=0, help="Folds of the reward cross-validation reported after "
    "learning (0: none; --alpha auto needs at least 2).")]

JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document on stdout with every figure of the tables "
    "(messages and progress go to stderr), for scripts.")]
MetricsOpt = Annotated[Optional[list[str]], typer.Option(
    "--metrics", "-m", help="Metrics, comma-separated or repeated: ndcg@k, recall@k, "
    "mrr@k, p@k, map@k, map, or trec_eval's names (ndcg_cut_10, P_10, recall_100, "
    "map_cut_100, recip_rank). Default: ndcg@10, recall@100, mrr@10.", show_default=False)]
ResamplesOpt = Annotated[int, typer.Option(
    "--n-resamples", min=10, help="Resamples of the paired tests (randomization and "
    "bootstrap).")]
IdenticalIdsOpt = Annotated[Optional[bool], typer.Option(
    "--ignore-identical-ids/--keep-identical-ids", show_default="as the data says",
    help="Leave a retrieved document whose id equals the query id out of every ranking "
         "(BEIR/MTEB's ignore_identical_ids); give one of the two, not both. Default: as "
         "the task says: on for a task named ArguAna or Quora (--task arguana on a query "
         "file too) and for a folder whose tttembed-task.json says "
         "{\"ignore_identical_ids\": true} (for a query file: the index's corpus folder), "
         "off elsewhere.")]
RunTagOpt = Annotated[str, typer.Option(
    "--run-tag", help="Tag in the last column of TREC run files.")]
