"""Chain retriever benchmarks, ratios measured in one run.

1. Chain search cost: greedy T-step chain search over all questions (batched per step)
   against T single-shot searches with the question alone (same frozen encoder, same
   index). Goal: chain time <= 1.3x T single searches. Also beam search (width 4), and the
   split of chain time into encoding, state-text building and index search.
2. Training: one on-policy epoch (run of the states-from encoder + negatives + training on
   gold + reached states) against one gold-only epoch, from the checkpoints' per-phase
   timings. The paper's ratio is 1.62x.

    python benchmarks/bench_chain.py [--data ../shared/data/2wikimultihopqa]
        [--questions 100] [--train-questions 60] [--max-seq-length 128] [--repeats 3]

The device follows tttembed.core.devices.pick_device (TTTEMBED_DEVICE, else cuda when present).
On a CPU the encoder cost grows with the tokens encoded, and chain states are much longer
than questions: the run prints the token ratio next to the time ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _support import DATA
from claims import Goal, emit

GOALS = {
    "chain": Goal("chain search: greedy T-step chain / T single searches", "<=", 1.3, "x"),
    "epoch": Goal("chain training: on-policy / gold epoch time (paper 1.62)", "info", None, "x"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA / "2wikimultihopqa")
    ap.add_argument("--index", type=Path, default=None)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--train-questions", type=int, default=60)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--encode-batch", type=int, default=None,
                    help="encoder batch size (default: the embedder's, 64)")
    args = ap.parse_args()

    from tttembed.chain import api
    from tttembed.chain.search import beam_chain, greedy_chain, single_shot
    from tttembed.chain.setup import frozen_encode, state_texts
    from tttembed.chain.train import TrainConfig, train_chain

    loaded = api.load(args.data, "test", args.index, max_questions=args.questions)
    task = loaded.task
    if args.encode_batch:
        loaded.embedder.batch_size = args.encode_batch
    n, steps = len(task.golds), task.max_hops
    texts = None
    encode_frozen = frozen_encode(loaded.embedder)
    phase = {"encode": 0.0, "texts": 0.0, "search": 0.0}
    seen: list[str] | None = None          # texts encoded, recorded outside the timings

    def encode(batch: list[str]):
        if seen is not None:
            seen.extend(batch)
        t0 = time.perf_counter()
        out = encode_frozen(batch)
        phase["encode"] += time.perf_counter() - t0
        return out

    def tokens(texts_: list[str]) -> int:
        tok = loaded.embedder.model.tokenizer
        return sum(len(ids) for ids in tok(texts_, truncation=True,
                                           max_length=args.max_seq_length)["input_ids"])

    class TimedTexts:
        """The current StateTexts, timed (one-by-one and batched calls)."""

        def __call__(self, qi, hist):
            assert texts is not None
            t0 = time.perf_counter()
            out = texts.text(qi, hist)
            phase["texts"] += time.perf_counter() - t0
            return out

        def texts(self, states):
            assert texts is not None
            t0 = time.perf_counter()
            out = texts.texts(states)
            phase["texts"] += time.perf_counter() - t0
            return out

    text_of = TimedTexts()

    def search(Q, k):
        t0 = time.perf_counter()
        out = loaded.index.search(Q, k)
        phase["search"] += time.perf_counter() - t0
        return out

    # the frozen embedder has no query cache of its own, so every call really encodes
    texts = state_texts(task, loaded.embedder.model, args.max_seq_length)
    single_shot(n, text_of, encode, search)  # warm-up (model load)
    singles, chains, beams = [], [], []
    chain_phase = dict.fromkeys(phase, 0.0)    # summed over the repeats
    warm_phase = dict.fromkeys(phase, 0.0)
    for _ in range(args.repeats):
        # a fresh StateTexts before each timed run: no state text or token offsets cached
        # from an earlier run (a cold start, as for questions never seen before)
        texts = state_texts(task, loaded.embedder.model, args.max_seq_length)
        t0 = time.perf_counter()
        single_shot(n, text_of, encode, search)
        singles.append(time.perf_counter() - t0)
        for key in phase:
            phase[key] = 0.0
        texts = state_texts(task, loaded.embedder.model, args.max_seq_length)
        t0 = time.perf_counter()
        greedy_chain(n, text_of, encode, search, steps)
        chains.append(time.perf_counter() - t0)
        for key in phase:
            chain_phase[key] += phase[key]
        texts = state_texts(task, loaded.embedder.model, args.max_seq_length)
        t0 = time.perf_counter()
        beam_chain(n, text_of, encode, search, steps, width=4)
        beams.append(time.perf_counter() - t0)
    # the same with every passage tokenised once beforehand (as passage vectors are
    # computed once for the index): only state texts are built inside the timings
    warm = state_texts(task, loaded.embedder.model, args.max_seq_length)
    t0 = time.perf_counter()
    n_prepared = warm.prepare()
    prepare_s = time.perf_counter() - t0
    texts = warm
    w_singles, w_chains = [], []
    for _ in range(args.repeats):
        warm.forget_states()
        t0 = time.perf_counter()
        single_shot(n, text_of, encode, search)
        w_singles.append(time.perf_counter() - t0)
        warm.forget_states()
        for key in phase:
            phase[key] = 0.0
        t0 = time.perf_counter()
        greedy_chain(n, text_of, encode, search, steps)
        w_chains.append(time.perf_counter() - t0)
        for key in phase:
            warm_phase[key] += phase[key]
    w_single, w_chain = statistics.median(w_singles), statistics.median(w_chains)
    single, chain, beam = (statistics.median(x) for x in (singles, chains, beams))
    seen = []
    single_shot(n, text_of, encode, search)
    single_tokens = tokens(seen)
    seen = []
    greedy_chain(n, text_of, encode, search, steps)
    chain_tokens = tokens(seen)
    seen = None
    print(f"data {args.data.name}: {n} questions, T = {steps}, "
          f"max_seq_length {args.max_seq_length}, medians of {args.repeats}")
    print(f"single-shot search: {single / n * 1000:.1f} ms/question "
          f"({n / single:.1f} questions/s)")
    print(f"greedy chain, T={steps}: {chain / n * 1000:.1f} ms/question "
          f"({n / chain:.1f} questions/s)")
    print(f"  ratio chain / (T x single) = {chain / (steps * single):.2f} (goal <= 1.3)")
    emit(GOALS, {"chain": chain / (steps * single)})
    token_ratio = chain_tokens / (steps * single_tokens)
    print(f"  tokens encoded: single {single_tokens / n:.1f}/question, chain "
          f"{chain_tokens / n:.1f}/question (= {token_ratio:.2f} x T single); "
          f"time ratio per token {chain / (steps * single) / token_ratio:.2f}")
    import torch

    print(f"  device {loaded.embedder.model.device}, torch threads {torch.get_num_threads()}, "
          f"encode batch {loaded.embedder.batch_size}")
    print("  chain time split: " + ", ".join(f"{k} {v / sum(chains) * 100:.0f}%"
                                             for k, v in chain_phase.items()))
    print(f"beam search, W=4: {beam / n * 1000:.1f} ms/question "
          f"(ratio to greedy {beam / chain:.2f})")
    print(f"with the {n_prepared} passages and questions tokenised beforehand "
          f"({prepare_s:.2f} s, once per corpus):")
    print(f"  single {w_single / n * 1000:.2f} ms/question, greedy chain "
          f"{w_chain / n * 1000:.2f} ms/question, ratio chain / (T x single) = "
          f"{w_chain / (steps * w_single):.2f} (goal <= 1.3)")
    print("  chain time split: " + ", ".join(f"{k} {v / sum(w_chains) * 100:.0f}%"
                                             for k, v in warm_phase.items()))
    if args.skip_train:
        return 0

    train = api.load(args.data, "train", args.index, max_questions=args.train_questions)
    cfg = dict(epochs=1, batch_size=32, max_seq_length=args.max_seq_length)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        gold = train_chain(train.task, train.index, frozen_encode(train.embedder),
                           TrainConfig(regime="gold", **cfg), Path(tmp) / "gold")
        gold_wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        onp = train_chain(train.task, train.index, frozen_encode(train.embedder),
                          TrainConfig(regime="on-policy", **cfg), Path(tmp) / "op",
                          states_from=Path(tmp) / "gold")
        onp_wall = time.perf_counter() - t0
    g, o = gold.history[0], onp.history[0]
    g_total, o_total = sum(g["seconds"].values()), sum(o["seconds"].values())
    print(f"training on {len(train.task.golds)} questions, one epoch each:")
    print(f"  gold epoch: {g['gold_states']} states, {g_total:.1f} s {g['seconds']} "
          f"(wall incl. model load and checkpoint {gold_wall:.1f} s)")
    print(f"  on-policy epoch: {o['gold_states']} + {o['other_states']} states, "
          f"{o_total:.1f} s {o['seconds']} (wall {onp_wall:.1f} s)")
    print(f"  ratio on-policy / gold epoch = {o_total / g_total:.2f} (paper: 1.62)")
    emit(GOALS, {"epoch": o_total / g_total})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
