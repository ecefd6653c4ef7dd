"""``bench_chain.py --json OUT``: the greedy chain's cost at the default settings and at
the cheaper state options of ``_chain_options``, against T single searches, each with its
C@5, all timed in one run (medians of ``--repeats``, the options interleaved)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from _chain_options import (
    ALPHAS,
    TitleSentence,
    choose_alpha,
    choose_entity_words,
    count_tokens,
    entity_passages,
    entity_texts,
    time_composed,
    titles_and_texts,
    token_split,
)

#: The limits of today's state text measured (the reference, the old default, the old
#: rule's); the default is ``DEFAULT_MAX_SEQ_LENGTH`` (128 since it was measured best).
REFERENCE = 128
OLD_DEFAULT = 256
RULE = 40
#: The goals of the cost-without-quality-loss claim.
RATIO_GOAL, C5_GAP = 1.5, 1.0


def _text_option(timed: Any, limit: int) -> Any:
    from _chain_timed import _Texts

    def make() -> Any:
        timed.reset(limit)
        return _Texts(timed)
    return make


def _title_option(timed: Any, docs: Any) -> Any:
    def make() -> Any:
        timed.frozen = timed.base
        task = timed.loaded.task
        return TitleSentence(task.questions, docs, timed.loaded.embedder.model, REFERENCE)
    return make


def _entity_option(timed: Any, docs: Any, n: int, encode: Any) -> Any:
    """Entity states, run by ``encode`` (``--entity-encoder``: an encoder trained on such
    states; default the one every other option runs)."""
    passages = entity_passages(docs, n)

    def make() -> Any:
        timed.frozen = encode or timed.base
        return entity_texts(timed.loaded.task.questions, passages,
                            timed.loaded.embedder.model)
    return make


def _default_option(timed: Any, docs: Any, own: Any) -> tuple[str, Any]:
    """The state ``tttembed chain search`` runs for this encoder by default (the one its
    checkpoint records; the untrained encoder's: the entity state at the product's
    words a passage), named as its option."""
    from tttembed.chain.forms import ENTITIES, ENTITY_WORDS

    if own.form == ENTITIES:
        return f"entities-{ENTITY_WORDS}", _entity_option(timed, docs, ENTITY_WORDS, None)
    return f"text-{own.max_seq_length}", _text_option(timed, own.max_seq_length)


def _chosen(spec: str, known: list[str], default: str) -> set[str]:
    """The options ``--options`` names (``all``: every one); the default and the
    128-token reference always run, as the claim compares them."""
    if spec == "all":
        return set(known)
    names = {n.strip() for n in spec.split(",") if n.strip()}
    unknown = sorted(names - set(known))
    if unknown:
        raise SystemExit(f"bench_chain.py: unknown --options {', '.join(unknown)}; "
                         f"choose from {', '.join(known)} (or all)")
    return names | {default, f"text-{REFERENCE}"}


def _rules(args: Any, index: Path, encode: Any, entity_encode: Any) -> dict[str, Any]:
    """The composed state's alpha and the entity state's words (with the encoder each
    runs), chosen on the training split (or given, where the data has none)."""
    from tttembed.chain import api

    if (args.data / "chains_train.jsonl").is_file():
        train = api.load(args.data, "train", index, max_questions=args.rule_questions)
        alpha, by_alpha = choose_alpha(train, encode)
        words, by_words = choose_entity_words(train, entity_encode, args.data)
        where = "the training split"
    else:
        alpha, by_alpha, words, by_words = args.alpha, {}, args.entity_words, {}
        where = "--alpha and --entity-words (no training split here)"
    print(f"composed state: alpha {alpha}, entity state: {words} words a passage, from "
          f"{where} (C@5 by alpha: {by_alpha}; tokens / T single by words: {by_words})")
    return {"alpha": alpha, "alphas_train_c5": by_alpha, "entity_words": words,
            "entity_words_train_tokens": by_words}


def _steps_split(timed: Any, texts: Any, steps: int, limit: int) -> list[dict[str, float]]:
    """Where the tokens of each step's states go (greedy chain, this state option)."""
    from tttembed.chain.search import greedy_chain

    batches: list[list[str]] = []

    def encode(batch: list[str]) -> Any:
        batches.append(list(batch))
        return timed.frozen(batch)

    greedy_chain(len(timed.loaded.task.golds), texts, encode, timed.loaded.index.search,
                 steps)
    tok = timed.loaded.embedder.model.tokenizer
    return [token_split(tok, b, timed.loaded.task.questions, limit + 2) for b in batches]


def _tokens(timed: Any, texts: list[str]) -> int:
    return count_tokens(timed.loaded.embedder.model, texts)


def measure(timed: Any, options: dict[str, Any], composed: float | None, repeats: int
            ) -> dict[str, dict[str, float]]:
    """Per option: median chain seconds / (T x median single seconds), C@5, tokens
    encoded / tokens of T single searches."""
    from _chain_timed import _Texts

    from tttembed.chain.search import chain_metrics, greedy_chain, single_shot

    task = timed.loaded.task
    n, steps = len(task.golds), task.max_hops
    timed.reset(REFERENCE)
    single_shot(n, _Texts(timed), timed.encode, timed.search)   # warm-up
    singles: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in [*options, "composed"]
                                     if name != "composed" or composed is not None}
    c5: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for _ in range(repeats):
        timed.reset(REFERENCE)
        timed.seen = []
        t0 = time.perf_counter()
        single_shot(n, _Texts(timed), timed.encode, timed.search)
        singles.append(time.perf_counter() - t0)
        single_tokens = _tokens(timed, timed.seen)
        for name, make in options.items():
            texts = make()
            timed.seen = []
            t0 = time.perf_counter()
            run = greedy_chain(n, texts, timed.encode, timed.search, steps)
            times[name].append(time.perf_counter() - t0)
            c5[name] = chain_metrics(run.ranking, task.golds)["all"]["C@5"]
            tokens[name] = _tokens(timed, timed.seen) / (steps * single_tokens)
        if composed is None:
            continue
        timed.seen = []
        timed.frozen = timed.base
        seconds, ranking = time_composed(timed.loaded, timed.encode, steps, composed, 1)
        times["composed"].append(seconds)
        c5["composed"] = chain_metrics(ranking, task.golds)["all"]["C@5"]
        tokens["composed"] = _tokens(timed, timed.seen) / (steps * single_tokens)
    timed.seen = None
    single = statistics.median(singles)
    return {name: {"ratio": round(statistics.median(t) / (steps * single), 3),
                   "c5": c5[name], "tokens": round(tokens[name], 3),
                   "ms_per_question": round(statistics.median(t) / n * 1000, 2)}
            for name, t in times.items()} | {
        "single": {"ratio": round(1 / steps, 3), "c5": float("nan"), "tokens": 1 / steps,
                   "ms_per_question": round(single / n * 1000, 2)}}


def cost_report(args: Any, loaded: Any, index: Path) -> dict[str, Any]:
    from _chain_timed import Timed

    from tttembed.chain import api
    from tttembed.chain.checkpoint import trained_settings
    from tttembed.chain.search import chain_metrics, single_shot

    # the model may read the longest option's states (text-256): each option's state
    # texts are cut to its own limit before they reach the model
    encode = api.query_encoder(loaded, args.encoder, OLD_DEFAULT, transfer=True)
    timed = Timed(loaded, encode)
    task = loaded.task
    n, steps = len(task.golds), task.max_hops
    entity_encode = None if args.entity_encoder is None else api.query_encoder(
        loaded, args.entity_encoder, OLD_DEFAULT, transfer=True)
    rules = _rules(args, index, encode, entity_encode or encode)
    docs = titles_and_texts(args.data, loaded.index.doc_ids)
    own = trained_settings(args.encoder)  # what chain search / serve run by default
    default, default_option = _default_option(timed, docs, own)
    options = {default: default_option,
               f"text-{REFERENCE}": _text_option(timed, REFERENCE),
               f"text-{OLD_DEFAULT}": _text_option(timed, OLD_DEFAULT),
               f"text-{RULE}": _text_option(timed, RULE),
               "title-sentence": _title_option(timed, docs),
               "entities": _entity_option(timed, docs, rules["entity_words"], entity_encode)}
    chosen = _chosen(args.options, [*options, "composed"], default)
    options = {name: make for name, make in options.items() if name in chosen}
    t0 = time.perf_counter()
    found = measure(timed, options, rules["alpha"] if "composed" in chosen else None,
                    args.repeats)
    timed.reset(REFERENCE)
    from _chain_timed import _Texts

    found["single"]["c5"] = chain_metrics(single_shot(n, _Texts(timed), encode,
                                                      loaded.index.search).ranking,
                                          task.golds)["all"]["C@5"]
    split = {name: _steps_split(timed, options[name](), steps, limit)
             for name, limit in ((default, own.max_seq_length),
                                 (f"text-{REFERENCE}", REFERENCE),
                                 (f"text-{OLD_DEFAULT}", OLD_DEFAULT),
                                 ("title-sentence", REFERENCE), ("entities", REFERENCE))
             if name in options}
    out = {"data": str(args.data), "encoder": str(args.encoder or "untrained"),
           "entity_encoder": str(args.entity_encoder or args.encoder or "untrained"),
           "T": steps, "questions": n, "repeats": args.repeats,
           "ratio_default": found[default]["ratio"], "c5_default": found[default]["c5"],
           "c5_reference_128": found[f"text-{REFERENCE}"]["c5"],
           "default": default, **best_of(found), **rules,
           "options": found, "token_split": split,
           "seconds": round(time.perf_counter() - t0, 1)}
    _print(out)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


def _print(out: dict[str, Any]) -> None:
    print(f"data {out['data']}, encoder {out['encoder']}: {out['questions']} test questions, "
          f"T = {out['T']}, medians of {out['repeats']} ({out['seconds']} s)")
    ref = out["c5_reference_128"]
    for name, r in out["options"].items():
        ok = name != "single" and r["ratio"] <= RATIO_GOAL and r["c5"] >= ref - C5_GAP
        print(f"  {name:15s} ratio {r['ratio']:.2f}x T single, C@5 {r['c5']:.2f} "
              f"({r['c5'] - ref:+.2f} vs 128), tokens {r['tokens']:.2f}, "
              f"{r['ms_per_question']:.1f} ms/question{'  both goals met' if ok else ''}")
    for name, steps in out["token_split"].items():
        print(f"  tokens per state, {name}: " + "; ".join(
            f"step {t + 1}: {s['state']:.0f} (question {s['question']:.0f}, separators "
            f"{s['separators']:.1f}, passages {s['passages']:.0f})"
            for t, s in enumerate(steps)))
    met = out["ratio_default"] <= RATIO_GOAL and out["c5_default"] >= ref - C5_GAP
    print(f"closing note: default ratio {out['ratio_default']:.2f} (goal <= {RATIO_GOAL}), "
          f"C@5 {out['c5_default']:.2f} vs 128-token {ref:.2f} (goal within {C5_GAP}): "
          f"{'met' if met else 'missed'}")
    near = out["c5_default"] >= out["c5_best"] - C5_GAP
    print(f"the default ({out['default']}): C@5 {out['c5_default']:.2f} at "
          f"{out['ratio_default']:.2f}x T single searches; the best measured state "
          f"({out['best']}): C@5 {out['c5_best']:.2f} at {out['ratio_best']:.2f}x; "
          f"within {C5_GAP}: {'yes' if near else 'NO'}")


def best_of(found: dict[str, Any]) -> dict[str, Any]:
    """The chain state with the best C@5 (ties: the cheaper), its C@5 and cost ratio."""
    chains = {n: r for n, r in found.items() if n != "single"}
    name = max(chains, key=lambda n: (chains[n]["c5"], -chains[n]["ratio"]))
    return {"best": name, "c5_best": chains[name]["c5"], "ratio_best": chains[name]["ratio"]}


__all__ = ["ALPHAS", "best_of", "cost_report"]
