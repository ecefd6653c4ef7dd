"""Chain retriever benchmarks, ratios measured in one run.

1. Chain search cost: greedy T-step chain search over all questions (batched per step)
   against T single-shot searches with the question alone (same frozen encoder, same
   index). Goal: chain time <= 2.0x T single searches. Where a step's time goes: encoding
   the question (step 1) and the longer states (later steps), building the state texts,
   the index search, and the Python between steps (the rest).
2. The state token budget: the rule below, fixed before the run, chooses the budget on the
   training split; the run reports the test split's cost ratio and C@5 at the default
   budget (``--max-seq-length``, before) and at the chosen one (after).
   Rule: the largest state token limit of (128, 96, 64, 48, 40, 32, 24) whose greedy
   T-step chain, on the training split's first ``--rule-questions`` questions with the
   untrained encoder, encodes at most 2.0x the tokens of T single searches (2.0 is the
   time goal: on a CPU the encoder's time follows the tokens, 1.00 time ratio per token
   in the run before this rule). The smallest limit when none passes. The rule never
   reads the test split.
3. Served chains: ``tttembed serve --chain base`` at the chosen budget under wrk (one
   thread, ``--clients`` connections, each request one test question) against the bare
   batched chain search (the same questions, in batches of the server's ``--max-batch``
   32, in this process). Goal: served questions/s >= 0.8x bare.
4. Training: one on-policy epoch against one gold-only epoch (the paper's 1.62x).

    python benchmarks/bench_chain.py [--data ../shared/data/2wikimultihopqa]
        [--questions 100] [--train-questions 60] [--rule-questions 100]
        [--max-seq-length 128] [--repeats 3] [--clients 32] [--duration 15]
        [--skip-train] [--skip-serve]
        [--json OUT [--encoder CKPT] [--entity-encoder CKPT] [--entity-words N]
                    [--options all|NAME,...]]

5. ``--json OUT`` (then only this part runs): the greedy chain at the
   default settings (those ``tttembed chain search`` runs: the entity state at 3 words a
   passage for the untrained encoder, ``entities-3``; the states a checkpoint records,
   e.g. ``text-128``) and every other state option of ``_chain_options`` (``text-256``:
   the old default) against T single searches, each with its C@5, on
   the test split, with the untrained encoder or ``--encoder CKPT`` (the entity states
   with ``--entity-encoder CKPT`` where given: a checkpoint trained on them; their words
   a passage by the training split's rule, or ``--entity-words`` where the data has no
   training split); where the tokens of
   each step's states go; written to OUT with the keys ``ratio_default``, ``c5_default``,
   ``c5_reference_128``, ``T``, ``questions``, ``options`` (per option: ``ratio``,
   ``c5``, ``tokens``), ``token_split``, ``best`` / ``c5_best`` / ``ratio_best`` (the
   chain state with the best C@5). Goals: the default <= 1.5x T single with C@5 within
   1.0 point of the 128-token state; the default's C@5 within 1.0 of the best measured
   state, its cost ratio printed beside it.

The device follows tttembed.core.devices.pick_device (TTTEMBED_DEVICE, else cuda when
present).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _chain_timed import Timed, _Texts
from _support import DATA, start_serve, stop
from claims import Goal, emit

GOALS = {
    "chain": Goal("chain search: greedy T-step chain / T single searches, chosen budget",
                  "<=", 2.0, "x"),
    "chain_before": Goal("chain search: the same at the default budget (before)", "info",
                         None, "x"),
    "c5_before": Goal("chain search: C@5 at the default budget (test)", "info", None, "%"),
    "c5_after": Goal("chain search: C@5 at the chosen budget (test)", "info", None, "%"),
    "served": Goal("chain search served: wrk questions/s / bare batched chain search", ">=",
                   0.8, "x"),
    "epoch": Goal("chain training: on-policy / gold epoch time (paper 1.62)", "info", None, "x"),
}
#: The state token limits the rule chooses among, and its token goal.
BUDGETS = (128, 96, 64, 48, 40, 32, 24)
TOKEN_GOAL = 2.0


def token_ratio(timed: Timed, n: int, steps: int, max_seq_length: int) -> float:
    """Tokens a greedy T-step chain encodes / tokens of T single searches."""
    from tttembed.chain.search import greedy_chain, single_shot

    timed.reset(max_seq_length)
    timed.seen = []
    single_shot(n, _Texts(timed), timed.encode, timed.search)
    single = timed.tokens(timed.seen, max_seq_length)
    timed.seen = []
    greedy_chain(n, _Texts(timed), timed.encode, timed.search, steps)
    chain = timed.tokens(timed.seen, max_seq_length)
    timed.seen = None
    return chain / (steps * single)


def choose_budget(data: Path, index: Path | None, questions: int) -> tuple[int, dict]:
    """The rule (module docstring) on the training split: (budget, token ratio by budget)."""
    from tttembed.chain import api

    train = api.load(data, "train", index, max_questions=questions)
    timed = Timed(train)
    ratios = {}
    for budget in BUDGETS:
        ratios[budget] = token_ratio(timed, len(train.task.golds), train.task.max_hops,
                                     budget)
        if ratios[budget] <= TOKEN_GOAL:
            return budget, ratios
    return BUDGETS[-1], ratios


def time_budget(timed: Timed, max_seq_length: int, repeats: int) -> dict[str, Any]:
    """Medians of single-shot and greedy chain search at one budget (cold: no token
    offsets cached), the chain's time split, its C@5 and its token ratio."""
    from tttembed.chain.search import beam_chain, chain_metrics, greedy_chain, single_shot

    task = timed.loaded.task
    n, steps = len(task.golds), task.max_hops
    texts = _Texts(timed)
    timed.reset(max_seq_length)
    single_shot(n, texts, timed.encode, timed.search)  # warm-up (model load)
    singles, chains = [], []
    split = {"encode step 1": 0.0, "encode later steps": 0.0, "texts": 0.0, "search": 0.0,
             "python between steps": 0.0}
    run = None
    for _ in range(repeats):
        timed.reset(max_seq_length)
        t0 = time.perf_counter()
        single_shot(n, texts, timed.encode, timed.search)
        singles.append(time.perf_counter() - t0)
        timed.reset(max_seq_length)
        t0 = time.perf_counter()
        run = greedy_chain(n, texts, timed.encode, timed.search, steps)
        chains.append(time.perf_counter() - t0)
        split["encode step 1"] += timed.calls[0]
        split["encode later steps"] += sum(timed.calls[1:])
        split["texts"] += timed.phase["texts"]
        split["search"] += timed.phase["search"]
        split["python between steps"] += chains[-1] - sum(timed.phase.values())
    timed.reset(max_seq_length)  # beam search once (information only)
    t0 = time.perf_counter()
    beam_chain(n, texts, timed.encode, timed.search, steps, width=4)
    beam = time.perf_counter() - t0
    assert run is not None
    single, chain = statistics.median(singles), statistics.median(chains)
    return {"budget": max_seq_length, "single": single, "chain": chain, "beam": beam,
            "ratio": chain / (steps * single), "split": split, "total": sum(chains),
            "c5": chain_metrics(run.ranking, task.golds)["all"]["C@5"],
            "tokens": token_ratio(timed, n, steps, max_seq_length)}


def report(r: dict[str, Any], n: int, steps: int, label: str) -> None:
    print(f"{label} (state token limit {r['budget']}):")
    print(f"  single-shot {r['single'] / n * 1000:.1f} ms/question, greedy chain T={steps} "
          f"{r['chain'] / n * 1000:.1f} ms/question: ratio chain / (T x single) = "
          f"{r['ratio']:.2f} (goal <= 2.0); tokens {r['tokens']:.2f} x T single; "
          f"C@5 {r['c5']:.2f}")
    print("  chain time split: " + ", ".join(f"{k} {v / r['total'] * 100:.0f}%"
                                             for k, v in r["split"].items()))
    print(f"  beam search W=4: {r['beam'] / n * 1000:.1f} ms/question "
          f"(ratio to greedy {r['beam'] / r['chain']:.2f})")


def bare_batched(loaded: Any, max_seq_length: int, batch: int, repeats: int) -> float:
    """Questions/s of the bare chain search (the server's code path, no server) over the
    loaded questions in batches of ``batch``, the untrained encoder, median of repeats."""
    from tttembed.chain.online import DEFAULT_STEPS, QuestionTexts, chain_run
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.states import TokenBudget

    questions = loaded.task.questions
    encode = frozen_encode(loaded.embedder)
    texts = QuestionTexts(loaded.task.passages,
                          TokenBudget.for_model(loaded.embedder.model, max_seq_length))
    rates = []
    for _ in range(repeats + 1):  # the first pass warms up (as wrk's first seconds do)
        t0 = time.perf_counter()
        for at in range(0, len(questions), batch):
            part = questions[at:at + batch]
            chain_run(len(part), texts.of(part), encode, loaded.index.search,
                      steps=DEFAULT_STEPS, keep=10)
        rates.append(len(questions) / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


LUA = """
local bodies = {}
local i = 0
init = function(args)
  local f = io.open(args[1], "r")
  for line in f:lines() do bodies[#bodies + 1] = line end
  f:close()
end
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", "/v1/chain/search", {["Content-Type"] = "application/json"},
                    bodies[i])
end
"""


def served_rate(loaded: Any, index: Path, max_seq_length: int, clients: int,
                duration: int) -> tuple[float, int]:
    """(questions/s, non-2xx answers) of ``serve --chain base`` under wrk."""
    import re

    with tempfile.TemporaryDirectory() as tmp:
        bodies = Path(tmp) / "bodies.jsonl"
        bodies.write_text("".join(json.dumps({"question": q, "top_k": 10}) + "\n"
                                  for q in loaded.task.questions))
        script = Path(tmp) / "chain.lua"
        script.write_text(LUA)
        proc, url = start_serve(index, ["--chain", "base", "--chain-max-seq-length",
                                        str(max_seq_length)])
        try:
            subprocess.run(["wrk", "-t1", "-c4", "-d3s", "-s", str(script), url, "--",
                            str(bodies)], capture_output=True, text=True, check=True)
            out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{duration}s",
                                  "--timeout", "30s", "-s", str(script), url, "--",
                                  str(bodies)], capture_output=True, text=True,
                                 check=True).stdout
        finally:
            stop(proc)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rate, int(bad.group(1)) if bad else 0


def train_ratio(args: argparse.Namespace) -> None:
    from tttembed.chain import api
    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import TrainConfig, train_chain

    train = api.load(args.data, "train", args.index, max_questions=args.train_questions)
    cfg = dict(epochs=1, batch_size=32, max_seq_length=args.max_seq_length)
    with tempfile.TemporaryDirectory() as tmp:
        gold = train_chain(train.task, train.index, frozen_encode(train.embedder),
                           TrainConfig(regime="gold", **cfg), Path(tmp) / "gold")
        onp = train_chain(train.task, train.index, frozen_encode(train.embedder),
                          TrainConfig(regime="on-policy", **cfg), Path(tmp) / "op",
                          states_from=Path(tmp) / "gold")
    g, o = gold.history[0], onp.history[0]
    g_total, o_total = sum(g["seconds"].values()), sum(o["seconds"].values())
    print(f"training on {len(train.task.golds)} questions, one epoch each: gold "
          f"{g_total:.1f} s {g['seconds']}, on-policy {o_total:.1f} s {o['seconds']}")
    print(f"  ratio on-policy / gold epoch = {o_total / g_total:.2f} (paper: 1.62)")
    emit(GOALS, {"epoch": o_total / g_total})


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA / "2wikimultihopqa")
    ap.add_argument("--index", type=Path, default=None)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--train-questions", type=int, default=60)
    ap.add_argument("--rule-questions", type=int, default=100)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-serve", action="store_true")
    ap.add_argument("--json", type=Path, default=None,
                    help="measure the default and the cheaper state options, write OUT")
    ap.add_argument("--encoder", type=Path, default=None,
                    help="a trained chain checkpoint (default: the untrained encoder)")
    ap.add_argument("--alpha", type=float, default=0.25,
                    help="the composed state's weight where the data has no training split")
    ap.add_argument("--options", default="all",
                    help="with --json: the state options to measure, a comma list of "
                         "text-256 (the old default), text-128, text-40, title-sentence, "
                         "entities, composed (default all; the default (the untrained "
                         "encoder's: entities-3; a checkpoint's: the states it records) "
                         "and text-128 always run)")
    ap.add_argument("--entity-encoder", type=Path, default=None,
                    help="a chain checkpoint trained on entity states, for the entities "
                         "option (default: --encoder)")
    ap.add_argument("--entity-words", type=int, default=6,
                    help="the entity state's words a passage where the data has no "
                         "training split (2Wiki's training split chooses it elsewhere)")
    return ap.parse_args()


def check_args(args: argparse.Namespace) -> str:
    """What is wrong with the command line, as one line with the fix ('' when nothing)."""
    if not (args.data / "corpus.jsonl").is_file():
        return (f"--data {args.data}: no corpus.jsonl; give a folder shaped like "
                "../shared/data/2wikimultihopqa")
    for name, path in (("--encoder", args.encoder), ("--entity-encoder", args.entity_encoder),
                       ("--index", args.index)):
        if path is not None and not path.is_dir():
            return (f"{name} {path}: no such folder (a checkpoint `tttembed chain train` "
                    "wrote)" if name != "--index" else f"{name} {path}: no such index folder")
    return ""


def transfer_note(loaded: Any, path: Path) -> str:
    """Why a checkpoint is read here as a transfer ('' when trained on this corpus): the
    CLI refuses another corpus's checkpoint, this benchmark measures it, and says so."""
    from tttembed.chain.checkpoint import read_checkpoint_manifest

    mine = loaded.index.manifest.get("corpus_fingerprint")
    theirs = read_checkpoint_manifest(path).get("corpus_fingerprint")
    if not mine or not theirs or mine == theirs:
        return ""
    return (f"was trained against another corpus (fingerprint {str(theirs)[:12]}..., this "
            f"index's {str(mine)[:12]}...): measured as a transfer, its C@5 is not this "
            "corpus's trained figure (`tttembed chain search` refuses it)")


def main() -> int:
    args = parse()
    bad = check_args(args)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    from tttembed.chain import api
    from tttembed.cli._common import quiet_libraries

    quiet_libraries()  # no screens of the tokenizer's "longer than the maximum" warning
    loaded = api.load(args.data, "test", args.index, max_questions=args.questions)
    index = args.index or _index_of(loaded)
    for name, path in (("--encoder", args.encoder), ("--entity-encoder", args.entity_encoder)):
        if path is not None and transfer_note(loaded, path):
            print(f"note: {name} {path} {transfer_note(loaded, path)}", flush=True)
    if args.json is not None:
        from _chain_cost import cost_report

        cost_report(args, loaded, index)
        return 0
    budget, ratios = choose_budget(args.data, index, args.rule_questions)
    print("rule (training split, tokens of the greedy chain / T single): " + ", ".join(
        f"limit {b}: {r:.2f}" for b, r in ratios.items()) + f" -> chosen limit {budget}")
    n, steps = len(loaded.task.golds), loaded.task.max_hops
    timed = Timed(loaded)
    before = time_budget(timed, args.max_seq_length, args.repeats)
    after = before if budget == args.max_seq_length else \
        time_budget(timed, budget, args.repeats)
    print(f"data {args.data.name}: {n} test questions, T = {steps}, medians of "
          f"{args.repeats}")
    report(before, n, steps, "before: the default budget")
    report(after, n, steps, "after: the chosen budget")
    measured: dict[str, float | None] = {"chain": after["ratio"],
                                         "chain_before": before["ratio"],
                                         "c5_before": before["c5"], "c5_after": after["c5"]}
    if not args.skip_serve and shutil.which("wrk"):
        bare = bare_batched(loaded, budget, 32, args.repeats)
        rate, bad = served_rate(loaded, index, budget, args.clients, args.duration)
        print(f"served (wrk, {args.clients} connections, {args.duration} s): {rate:.1f} "
              f"questions/s ({bad} non-2xx); bare batched chain search (batches of 32): "
              f"{bare:.1f} questions/s; ratio {rate / bare:.2f} (goal >= 0.8)")
        measured["served"] = rate / bare
    emit(GOALS, measured)
    _closing(after, before, measured.get("served"))
    if not args.skip_train:
        train_ratio(args)
    return 0


def _index_of(loaded: Any) -> Path:
    return Path(loaded.index.path)


def _closing(after: dict, before: dict, served: float | None) -> None:
    met = "met" if after["ratio"] <= 2.0 else "missed"
    why = "" if met == "met" else (
        f": the later steps encode {after['tokens']:.2f}x the tokens of T single searches "
        "and encoding is most of the time")
    print(f"closing note: greedy chain / T single = {after['ratio']:.2f} at state token "
          f"limit {after['budget']} against the goal 2.0: {met}{why}; before "
          f"{before['ratio']:.2f} at limit {before['budget']}. C@5 {before['c5']:.2f} -> "
          f"{after['c5']:.2f} ({after['c5'] - before['c5']:+.2f}).")
    if served is not None:
        print(f"closing note: served / bare batched = {served:.2f} against the goal 0.8: "
              f"{'met' if served >= 0.8 else 'missed'}.")


if __name__ == "__main__":
    raise SystemExit(main())
