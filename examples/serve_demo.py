"""An app's query side switched to the proxy: raw vs adapted nDCG@10 on the demo questions.

The "app" keeps its own vector store (a numpy matrix here; a vector database in real
life) and talks to embeddings only through the OpenAI client. It embeds its documents
through ``/v1/embeddings`` (raw vectors, unchanged) and its questions either through the
same base URL (raw) or through ``/t/{task}/v1`` (adapted): the one line that changes.

The demo task (this Python's docstrings and the shipped questions, ``tttembed.demo.export_demo``)
is indexed, a guarded state (``--method auto``: per task the part whose judged re-search
gains, raw where none does) is learned from the labels of 80% of the questions, and
`tttembed serve` applies it to the unseen 20%. Unseen questions get the state's shared
part (task-wise or global); where the guard kept the raw vectors, adapted = raw, and the
script says so.

    python examples/serve_demo.py [--modules json,csv,re,...] [--port 8765]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tttembed.api as tt
from tttembed.demo import export_demo


def read_beir(folder: Path) -> tuple[dict, dict, dict]:
    corpus = {}
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        row = json.loads(line)
        corpus[row["_id"]] = (row.get("title", "") + " " + row["text"]).strip()
    queries = {json.loads(x)["_id"]: json.loads(x)["text"]
               for x in (folder / "queries.jsonl").read_text().splitlines() if x}
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    return corpus, queries, qrels


def start(index: Path, state: Path, port: int) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen([sys.executable, "-c", "from tttembed.cli import main; main()",
                             "serve", "--index", str(index), "--state", str(state),
                             "--port", str(port), "--log-level", "warning"])
    for _ in range(900):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def app_search(base_url: str, ids: list[str], store: np.ndarray, questions: dict[str, str],
               k: int = 10) -> dict[str, dict[str, float]]:
    """The app's retrieval: embed questions through ``base_url``, search its own store."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="unused")
    resp = client.embeddings.create(input=list(questions.values()), model="any")
    q = np.array([d.embedding for d in resp.data], dtype=np.float32)
    scores = q @ store.T
    run = {}
    for qid, row in zip(questions, scores):
        top = np.argsort(-row)[:k]
        run[qid] = {ids[i]: float(row[i]) for i in top}
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default="", help="restrict the demo corpus (comma list)")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve-demo-"))
    modules = tuple(m for m in args.modules.split(",") if m)
    folder = export_demo(work / "stdlib-docs", modules=modules)
    corpus, queries, qrels = read_beir(folder)
    index = tt.index_corpus(folder, work / "index")
    ids = list(queries)  # the split `tttembed demo` uses: 80% learn, 20% unseen
    perm = np.random.default_rng(args.seed).permutation(len(ids))
    cut = int(round(0.8 * len(ids)))
    learn_q = {ids[i]: queries[ids[i]] for i in sorted(perm[:cut])}
    unseen = {ids[i]: queries[ids[i]] for i in sorted(perm[cut:])}
    state = tt.learn(index, learn_q, scorer=f"qrels:{folder}", method="auto",
                     task=folder.name, budget=10)
    path = state.save(work / "auto.npz")
    shared = (state.selection or {}).get("shared", {})
    proc = start(work / "index", path, args.port)
    try:
        base = f"http://127.0.0.1:{args.port}"
        from openai import OpenAI

        docs = OpenAI(base_url=base + "/v1", api_key="unused")
        doc_ids = list(corpus)
        store = np.concatenate([
            np.array([d.embedding for d in docs.embeddings.create(
                input=[corpus[i] for i in doc_ids[s:s + 256]], model="any").data], np.float32)
            for s in range(0, len(doc_ids), 256)])
        runs = {"raw (base_url=/v1)": app_search(base + "/v1", doc_ids, store, unseen),
                f"adapted (base_url=/t/{folder.name}/v1)":
                    app_search(f"{base}/t/{folder.name}/v1", doc_ids, store, unseen)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    judged = {q: qrels[q] for q in unseen if q in qrels}
    print(f"{len(corpus)} documents; state learned on {len(learn_q)} questions, "
          f"evaluated on {len(judged)} unseen ones")
    for task, part in shared.items():
        print(f"task {task}: unseen questions get the {part} part" + (
            " (the guard found no gain for it: the raw vectors, so adapted = raw)"
            if part == "raw" else " (the guard's choice)"))
    for name, run in runs.items():
        print(f"{name:<40} nDCG@10 {tt.run_metrics(judged, run)['ndcg@10']:.4f}")


if __name__ == "__main__":
    main()
