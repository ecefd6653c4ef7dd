"""The chain retriever's Python API (what ``tttembed chain search|train|eval`` call)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tttembed.chain.analysis import WRONG_BUCKETS, evaluate_chain
from tttembed.chain.search import ChainRun, beam_chain, chain_metrics, greedy_chain
from tttembed.chain.setup import (
    DEFAULT_MAX_SEQ_LENGTH,
    ChainTask,
    chain_task,
    frozen_embedder,
    frozen_encode,
    open_or_build_index,
    state_texts,
)
from tttembed.chain.train import load_encoder
from tttembed.embed.base import DEFAULT_EMBEDDER
from tttembed.core.errors import ConfigError
from tttembed.reporting import bar_plot, line_plot, markdown_table, write_json, write_results


@dataclass(frozen=True)
class Loaded:
    task: ChainTask
    index: Any
    embedder: Any


def load(data: str | os.PathLike[str], split: str, index_dir: str | os.PathLike[str] | None,
         *, embedder: str = DEFAULT_EMBEDDER, max_questions: int | None = None,
         progress: Callable[[int], None] | None = None) -> Loaded:
    """Dataset split + frozen passage index (built under ``index_dir``, default
    ``<cache>/chain-index/<dataset name>``, when absent)."""
    from tttembed.data.chains import load_multihop
    from tttembed.core.paths import cache_dir

    corpus, chains = load_multihop(data, split)
    emb = frozen_embedder(embedder)
    if index_dir is None:
        index_dir = cache_dir() / "chain-index" / Path(data).resolve().name
    handle = open_or_build_index(corpus, index_dir, emb, progress)
    if max_questions is not None and max_questions < 1:
        raise ConfigError("--max-questions must be at least 1")
    return Loaded(chain_task(chains, corpus, handle.doc_ids).subset(max_questions), handle, emb)


def query_encoder(loaded: Loaded, adapter: str | os.PathLike[str] | None,
                  max_seq_length: int) -> Callable[[list[str]], Any]:
    """The frozen model's query side (adapter None) or a trained checkpoint's encoder."""
    if adapter is None:
        return frozen_encode(loaded.embedder)
    return load_encoder(adapter, max_seq_length=max_seq_length, index=loaded.index).encode


def run_search(loaded: Loaded, encode: Callable[[list[str]], Any], *, steps: int | None = None,
               beam: int = 1, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH, depth: int = 100,
               progress: Callable[[int], None] | None = None) -> ChainRun:
    task = loaded.task
    texts = state_texts(task, loaded.embedder.model, max_seq_length)
    steps = steps or task.max_hops
    search = loaded.index.search
    if beam > 1:
        return beam_chain(len(task.golds), texts, encode, search, steps, width=beam,
                          depth=depth, keep=depth, progress=progress)
    return greedy_chain(len(task.golds), texts, encode, search, steps, depth=depth,
                        keep=depth, progress=progress)


def run_to_beir(run: ChainRun, loaded: Loaded) -> dict[str, dict[str, float]]:
    """BEIR run dict; scores decrease along the final ranking (rank-based: 1/(1+rank))."""
    ids = loaded.index.doc_ids
    return {c.qid: {ids[int(r)]: 1.0 / (1 + pos) for pos, r in enumerate(run.ranking[i])
                    if r >= 0}
            for i, c in enumerate(loaded.task.chains)}


def search_metrics(run: ChainRun, loaded: Loaded) -> dict[str, Any]:
    return chain_metrics(run.ranking, loaded.task.golds)


def run_eval(loaded: Loaded, encoders: Sequence[tuple[str, str | None]], *,
             steps: int | None = None, beam: int = 4, beam_encoders: Sequence[str] = (),
             reference: str | None = None, max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Evaluate named encoders ((name, adapter folder or None for the untrained model))."""
    names = [n for n, _ in encoders]
    if len(set(names)) != len(names):
        raise ConfigError("encoder names must be distinct")
    for name in [*beam_encoders, *([reference] if reference else [])]:
        if name not in names:
            raise ConfigError(f"unknown encoder name {name!r}; known: {', '.join(names)}")
    fns = {name: query_encoder(loaded, path, max_seq_length) for name, path in encoders}
    texts = state_texts(loaded.task, loaded.embedder.model, max_seq_length)
    return evaluate_chain(loaded.task.golds, texts, loaded.index.search, fns,
                          steps=steps or loaded.task.max_hops, reference=reference,
                          beam_width=beam, beam_encoders=beam_encoders, progress=progress)


def write_report(out: str | os.PathLike[str], config: dict[str, Any],
                 results: dict[str, Any]) -> list[Path]:
    """results.json, report.md and PNG plots of an evaluation."""
    out = Path(out)
    written = [write_results(out / "results.json", config, results)]
    systems = results["systems"]
    md = ["# Chain retrieval report", "",
          f"Data: `{config.get('data')}` split `{config.get('split')}`, "
          f"{config.get('n_questions')} questions, T = {config.get('steps')} steps.", "",
          "## Retrieval (%)", ""]
    hop_keys = sorted({h for m in systems.values() for h in m["by_hops"]})
    headers = ["system", "C@5", "C@10", "recall@5", "recall@10"] + \
        [f"C@5 ({h}-hop)" for h in hop_keys] + ["s / question"]
    rows = [[name, m["all"]["C@5"], m["all"]["C@10"], m["all"]["recall@5"],
             m["all"]["recall@10"]] + [m["by_hops"].get(h, {}).get("C@5") for h in hop_keys]
            + [results["latency_s_per_question"].get(name)] for name, m in systems.items()]
    md += [markdown_table(headers, rows), "## State mismatch (% of states still missing gold "
           "that hold a wrong passage)", ""]
    steps_ = sorted({r["step"] for rows_ in results["mismatch"].values() for r in rows_})
    mm = results["mismatch"]
    md.append(markdown_table(["encoder"] + [f"step {s}" for s in steps_],
                             [[name] + [next((r["share_wrong"] for r in mm[name]
                                              if r["step"] == s), None) for s in steps_]
                              for name in mm]))
    rec = results["recovery"]
    md += ["", f"## Next-step success (%) on {rec['n_states']} states reached by "
           f"`{rec['reference']}`, by wrong passages in the history", ""]
    md.append(markdown_table(["encoder"] + [f"{b} wrong" for b in WRONG_BUCKETS],
                             [[name] + [f"{v[b]['rate']} (n={v[b]['n']})" for b in WRONG_BUCKETS]
                              for name, v in rec["by_encoder"].items()]))
    dele = {k: v for k, v in results["deletion"].items() if k != "reference"}
    md += ["", "## Deletion counterfactual (states with a wrong passage)", ""]
    md.append(markdown_table(["encoder", "states", "as reached", "wrong deleted", "cost"],
                             [[k, v["n"], v["original"], v["deleted"], v["cost"]]
                              for k, v in dele.items()]))
    names = list(systems)
    written.append(bar_plot(out / "completeness.png", names,
                            {"C@5": [systems[n]["all"]["C@5"] for n in names],
                             "C@10": [systems[n]["all"]["C@10"] for n in names]},
                            title="Complete evidence in the top k", ylabel="%"))
    written.append(line_plot(out / "mismatch.png", steps_,
                             {n: [next((r["share_wrong"] for r in mm[n] if r["step"] == s),
                                       None) for s in steps_] for n in mm},
                             title="States holding a wrong passage", xlabel="step",
                             ylabel="% of states missing gold"))
    written.append(bar_plot(out / "recovery.png", list(WRONG_BUCKETS),
                            {n: [v[b]["rate"] for b in WRONG_BUCKETS]
                             for n, v in rec["by_encoder"].items()},
                            title="Next-step success by wrong passages", ylabel="%"))
    md += ["", "![completeness](completeness.png) ![mismatch](mismatch.png) "
           "![recovery](recovery.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(md), encoding="utf-8")
    written.append(report)
    return written


__all__ = ["Loaded", "load", "query_encoder", "run_eval", "run_search", "run_to_beir",
           "search_metrics", "write_json", "write_report"]
