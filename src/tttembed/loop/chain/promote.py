"""A chain candidate's training, promotion check and registration (one cycle of
:class:`tttembed.loop.chain.learn.ChainLearner`).

The check: the served version and the candidate each run the served greedy chain (the
served T and state token limit) on the questions held out by text from training
(:func:`tttembed.loop.chain.rows.held_out`); the top :data:`K` of both final lists are
judged through the same judge, ledger and budget (source ``validation``: a pair already
judged is free), and a question counts complete when every passage judged relevant for it
is in the top K (C@5 under the judge). Questions with no relevant passage judged decide
nothing. The candidate is promoted only when at least ``--min-queries`` questions decide
and the paired test (exact one-sided sign test on the questions where the two differ) says
better at p < :data:`ALPHA`; otherwise it is registered unpromoted with the reason, as a
state version records a refusal.

Nothing is trained twice: a cycle's inputs (the served version, T, the token limit, the
training seed and base, ``--min-queries``, the training states with their relevant
passages, the held-out questions with theirs, after the check has paid) are digested
(:func:`inputs_digest`) into the candidate's record. A later cycle with the same digest
would train the same candidate and reach the same decision, so it trains nothing and
says which version already holds that answer (:func:`trained_before`); new chain searches,
rewards or labels change the digest. A check the budget could not pay records none, so
a raised ``--judge-budget`` checks again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tttembed.chain.forms import TEXT, form_passages
from tttembed.chain.online import DEFAULT_STEPS, chain_run
from tttembed.chain.states import StateTexts, TokenBudget
from tttembed.core.errors import DataError, TTTEmbedError
from tttembed.loop.chain.rows import HOLD_OUT
from tttembed.loop.judge import BudgetSpent
from tttembed.loop.rows import CHAIN_TASK

if TYPE_CHECKING:
    from tttembed.chain.traffic_train import TrafficSet
    from tttembed.loop.chain.rows import ChainCycle, Served

#: The paired test's level and the list depth C@K is judged at.
ALPHA = 0.05
K = 5
#: The fewest discordant questions with which the one-sided sign test can reach ALPHA
#: (0.5 ** 5 = 0.031; 0.5 ** 4 = 0.0625).
SIGN_MIN = 5
log = logging.getLogger("tttembed.loop")
#: What can go wrong while loading a chain version's files (besides our own errors).
LOAD_ERRORS = (TTTEmbedError, OSError, ValueError, RuntimeError, KeyError)


def sign_test(old: Sequence[bool], new: Sequence[bool]) -> tuple[int, int, float]:
    """(questions the new one completes and the old one not, the reverse, one-sided exact
    p of the first count under no difference)."""
    better = sum(1 for o, n in zip(old, new) if n and not o)
    worse = sum(1 for o, n in zip(old, new) if o and not n)
    total = better + worse
    if total == 0:
        return 0, 0, 1.0
    tail = sum(math.comb(total, i) for i in range(better, total + 1))
    return better, worse, tail / 2 ** total


def served_checkpoint(registry: Any) -> tuple[str | None, Path | None]:
    """(the served version, its checkpoint folder); (None, None) while the untrained
    encoder is served. A version whose files cannot be loaded is one DataError line."""
    from tttembed.registry.chain import FOLDER, checkpoint_files

    name = registry.served()
    if name is None:
        return None, None
    try:
        registry.validate(name)
        path = Path(registry.get(name).path) / FOLDER
        checkpoint_files(path)  # its adapter's bytes checked, as `states add` checks them
        return name, path
    except LOAD_ERRORS as exc:
        raise DataError(f"chain registry {registry.location}: the served version {name} "
                        f"cannot be loaded ({' '.join(str(exc).split())}); learning waits, "
                        "nothing is paid for it", fix=f"roll back (`tttembed states rollback "
                        f"{registry.location}`) or promote a sound version") from None


def _encoder(path: Path | None, limit: int, index: Any, what: str) -> Any:
    from tttembed.chain.checkpoint import load_encoder

    try:
        return load_encoder(path, max_seq_length=limit, index=index)
    except LOAD_ERRORS as exc:
        raise DataError(f"the {what} chain encoder {path} cannot be loaded "
                        f"({' '.join(str(exc).split())})",
                        fix="roll the chain registry back to a sound version") from None


def chain_top_lists(learner: Any, path: Path | None, questions: list[str], steps: int,
                    limit: int, what: str, form: str = TEXT) -> list[list[str]]:
    """The top :data:`K` of the served greedy chain's final list for each question, its
    states of ``form`` cut to ``limit`` tokens."""
    encoder = _encoder(path, limit, learner.index, what)
    passages = form_passages(learner.passages, learner.titles, form)
    texts = StateTexts(questions, passages,
                       budget=TokenBudget.for_model(encoder.model, limit))
    run = chain_run(len(questions), texts, encoder.encode, learner.index.search,
                    steps=steps, keep=max(K, steps))
    ids = learner.index.doc_ids
    return [[ids[int(r)] for r in row[:K] if r >= 0] for row in run.ranking]


def asked_needed(held: int, need: int) -> str:
    """How many asked questions a check of ``need`` held-out ones waits for, with what was
    measured: the operator's answer to "how much traffic before it can promote"."""
    want = max(need, SIGN_MIN)
    return (f"about {want * HOLD_OUT} distinct questions asked (one in {HOLD_OUT} is held "
            f"out; {held} held out so far; on 2WikiMultihopQA 150 asked reached p 0.06, 500 "
            "asked twice promoted +14.6 C@5)")


def cannot_promote(held: int) -> str:
    """Why a check on ``held`` held-out questions can never promote ('' when it can), said
    before it is run: the one-sided sign test needs :data:`SIGN_MIN` that differ."""
    if held >= SIGN_MIN:
        return ""
    return (f"a one-sided sign test on {held} held-out question(s) can never reach p < "
            f"{ALPHA} (it needs at least {SIGN_MIN} that differ)")


def held_out_check(learner: Any, parent: Path | None, candidate: Path, steps: int,
                   limit: int, served_form: str = TEXT) -> dict[str, Any]:
    """The promotion check (module docstring): its record, ``decision`` one of
    ``better``, ``not better``, ``waiting``, ``unpaid``. The served version runs the
    states it was served with (``served_form``), the candidate the text states it was
    trained on."""
    from tttembed.loop.chain.rows import (
        held_out_questions,
        judged_pairs,
        labels,
        relevant_rows,
    )

    need = int(learner.config.min_queries)
    held = held_out_questions(learner.last.searches)
    if len(held) < need:
        return {"decision": "waiting", "held_out": len(held), "reason": (
            f"{len(held)} held-out question(s) asked; the check needs --min-queries {need}: "
            f"kept unpromoted until {asked_needed(len(held), need)}")}
    never = cannot_promote(len(held))
    if never:  # said before the check pays: it runs for its figures only
        log.warning("chain check: %s; it runs for its figures and cannot promote until %s",
                    never, asked_needed(len(held), need))
    old = chain_top_lists(learner, parent, held, steps, limit, "served", served_form)
    new = chain_top_lists(learner, candidate, held, steps, limit, "candidate")
    judged = judged_pairs(learner.store)
    todo = list(dict.fromkeys((CHAIN_TASK, q, d) for q, a, b in zip(held, old, new)
                              for d in (*a, *b) if (CHAIN_TASK, q, d) not in judged))
    try:
        _, paid = learner.judge.pay(todo, source="validation")
    except BudgetSpent:
        return {"decision": "unpaid", "held_out": len(held), "reason": (
            f"the judge budget cannot pay the check's {len(todo)} new pair(s) on "
            f"{len(held)} held-out questions: kept unpromoted (raise --judge-budget)")}
    rel = relevant_rows(held, learner.last.searches, judged_pairs(learner.store),
                        labels(learner.store), learner.row_of)
    ids = learner.index.doc_ids
    decided = [i for i, q in enumerate(held) if rel.get(q)]
    complete_old = [set(ids[r] for r in rel[held[i]]) <= set(old[i]) for i in decided]
    complete_new = [set(ids[r] for r in rel[held[i]]) <= set(new[i]) for i in decided]
    better, worse, p = sign_test(complete_old, complete_new)
    n = len(decided)
    c5 = [100.0 * sum(x) / n if n else 0.0 for x in (complete_old, complete_new)]
    record = {"held_out": len(held), "decided": n, "c5_served": round(c5[0], 2),
              "c5_candidate": round(c5[1], 2), "better": better, "worse": worse,
              "p": round(p, 6), "validation_pairs": paid, "min_queries": need}
    said = (f"held-out C@{K} under the judge {c5[0]:.2f} -> {c5[1]:.2f} on {n} questions "
            f"held out by text (paired sign test: {better} better, {worse} worse, "
            f"p {p:.3g})")
    if n < need:
        return {**record, "decision": "waiting", "reason": (
            f"{said}; only {n} held-out question(s) have a passage judged relevant, the "
            f"check needs --min-queries {need}: kept unpromoted")}
    if never:
        return {**record, "decision": "not better", "reason": (
            f"{said}: {never}, kept unpromoted until {asked_needed(len(held), need)}")}
    if better > worse and p < ALPHA:
        return {**record, "decision": "better", "reason": f"{said}: better, promoted"}
    return {**record, "decision": "not better",
            "reason": f"{said}: not better at p < {ALPHA}, kept unpromoted"}


def inputs_digest(learner: Any, parent: str | None, steps: int, limit: int,
                  data: TrafficSet, cfg: Any, form: str = TEXT) -> str:
    """The digest of everything a cycle's candidate and its check's decision follow from
    (module docstring)."""
    from tttembed.loop.chain.rows import (
        held_out_questions,
        judged_pairs,
        labels,
        relevant_rows,
    )

    held = sorted(held_out_questions(learner.last.searches))
    rel = relevant_rows(held, learner.last.searches, judged_pairs(learner.store),
                        labels(learner.store), learner.row_of)
    doc = {"parent": parent, "steps": steps, "limit": limit, "seed": cfg.seed,
           **({} if form == TEXT else {"served_form": form}),
           "base": cfg.base, "min_queries": int(learner.config.min_queries),
           "questions": data.questions, "relevant": data.relevant,
           "states": [[q, list(h)] for q, h in data.states],
           "held_out": [[q, sorted(rel.get(q, []))] for q in held]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def trained_before(registry: Any, parent: str | None, digest: str) -> Any:
    """The latest version a cycle with these inputs registered (None: none)."""
    same = [v for v in registry.versions() if v.manifest.get("parent") == parent
            and v.manifest.get("trained", {}).get("inputs_digest") == digest]
    return max(same, key=lambda v: v.number) if same else None


def nothing_new(version: Any, parent: str | None, data: TrafficSet) -> str:
    """The reason of a cycle that trains nothing because ``version`` answered its inputs."""
    served = parent or "the untrained encoder"
    then = ("was promoted and has since been rolled back" if version.promoted
            else "was kept unpromoted")
    return (f"nothing new to learn: {version.name} was trained from {served} on the same "
            f"{len(data.states)} states and relevant passages and checked on the same "
            f"held-out questions, and {then} ({version.manifest.get('reason', '')}); "
            "nothing trained, waiting for new chain searches, rewards or labels")


def register_candidate(registry: Any, checkpoint: Path, record: dict[str, Any]) -> Any:
    """Register the candidate checkpoint (checked as ``states add`` checks one) with the
    cycle's ``record`` in its manifest, not promoted."""
    from tttembed.registry.chain import (
        check_fits,
        checkpoint_files,
        checkpoint_record,
        files_digest,
    )

    rec = checkpoint_record(checkpoint)
    check_fits(registry.manifest, rec, f"the chain candidate cannot be added to "
                                       f"{registry.location}")
    files = checkpoint_files(checkpoint)
    return registry.register_files(files, added_by="learner", chain_digest=files_digest(files),
                                   **rec, **record)


def train_and_check(learner: Any, train: list[Served], relevant: dict[str, list[int]],
                    limit: int, form: str = TEXT) -> ChainCycle:
    """Train a candidate warm-started from the served version on ``train``'s states, check
    it, register it and promote it when the check says better."""
    from tttembed.chain.traffic_train import TrafficSet, train_traffic
    from tttembed.chain.train import TrainConfig
    from tttembed.embed.base import DEFAULT_EMBEDDER
    from tttembed.loop.chain.rows import ChainCycle, majority

    parent, warm = served_checkpoint(learner.registry)
    steps = majority([len(s.rows) for s in train], DEFAULT_STEPS)
    data = TrafficSet.build([(s.question, s.rows) for s in train], relevant)
    cfg = TrainConfig(base=learner.registry.manifest.get("base") or DEFAULT_EMBEDDER,
                      seed=int(learner.config.seed))
    before = trained_before(learner.registry, parent,
                            inputs_digest(learner, parent, steps, limit, data, cfg, form))
    if before is not None:
        return ChainCycle(None, False, nothing_new(before, parent, data))
    out = learner.work / f"candidate-{uuid.uuid4().hex[:8]}"
    try:
        manifest = train_traffic(data, learner.passages, learner.index, learner.frozen, cfg,
                                 out, warm=warm, steps=steps, max_seq_length=limit)
        check = held_out_check(learner, warm, out, steps, limit, form)
        promote = check["decision"] == "better"
        # after the check paid; a check the budget could not pay is asked again
        digest = (None if check["decision"] == "unpaid"
                  else inputs_digest(learner, parent, steps, limit, data, cfg, form))
        record = {"parent": parent, "reason": check["reason"], "evidence": check,
                  "trained": {"questions": len(data.questions), "states": len(data.states),
                              "inputs_digest": digest,
                              "searches": len(train), "max_seq_length": limit,
                              "served_state": form,
                              "loss": manifest["history"][-1]["loss"]},
                  "skipped": dict(learner.last.skipped)}
        version = register_candidate(learner.registry, out, record)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if promote:
        learner.registry.promote(version.name, by="learner", reason=check["reason"])
    return ChainCycle(version.name, promote, check["reason"],
                      int(check.get("validation_pairs", 0)), check)


__all__ = ["ALPHA", "K", "chain_top_lists", "held_out_check", "inputs_digest",
           "nothing_new", "register_candidate", "served_checkpoint", "sign_test",
           "trained_before", "train_and_check"]
