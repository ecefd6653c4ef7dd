"""The reward audit: a judge that disagrees with a few human-judged queries is refused
before anything is learned from it; one that agrees is recorded in the state."""

from __future__ import annotations

import pytest

from tests.ttt.test_guard import _learn, _task
from tttembed.core.errors import ConfigError, DataError
from tttembed.score.qrels import QrelsScorer


def _audit_file(path, qrels, n=6):
    lines = ["query-id\tcorpus-id\tscore"]
    for q in list(qrels)[:n]:
        lines += [f"{q}\t{d}\t{g}" for d, g in qrels[q].items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_inverted_judge_is_refused_and_a_good_one_recorded(tmp_path):
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    # the audit judges each query's relevant document and its distractors by hand
    judged = {q: {**g, **{d: 0 for d in docs if d.startswith(f"x{q[1:]}_")}}
              for q, g in qrels.items()}
    audit = _audit_file(tmp_path / "audit.tsv", judged)
    inverted = {q: {d: 1 - g for d, g in j.items()} for q, j in judged.items()}
    bad = QrelsScorer("inverted", qrels=inverted)
    with pytest.raises(DataError, match=r"AUC 0\.000 .* below --audit-min-auc 0\.6") as info:
        _learn(index, emb, docs, queries, qrels, budget=3, scorer=bad,
               audit=f"qrels:{audit}")
    assert str(audit) in str(info.value)
    good = _learn(index, emb, docs, queries, qrels, budget=3, audit=f"qrels:{audit}")
    assert good.audit["auc"] == pytest.approx(1.0) and good.audit["queries"] == 6
    assert good.audit["pairs"] == 6 * 20 and good.audit["ci"] == [1.0, 1.0]
    with pytest.raises(ConfigError, match="qrels:PATH"):
        _learn(index, emb, docs, queries, qrels, budget=3, audit="bm25")


def test_a_positives_only_audit_counts_the_retrieved_unjudged_documents_as_negatives(tmp_path):
    """BEIR qrels usually list relevant documents only: the audit adds each audited query's
    top-10 retrieved documents the file does not judge as non-relevant (trec_eval's
    convention), so the AUC is defined; a file whose every pair is one class is a clear
    error, not an AUC of nan."""
    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    audit = _audit_file(tmp_path / "positives.tsv", qrels)  # one relevant document each
    good = _learn(index, emb, docs, queries, qrels, budget=3, audit=f"qrels:{audit}")
    assert good.audit["pairs"] > 6 and good.audit["auc"] == pytest.approx(1.0)
    inverted = QrelsScorer("inverted", qrels={q: {d: 1 for d in docs if d not in g}
                                              for q, g in qrels.items()})
    with pytest.raises(DataError, match="below --audit-min-auc"):
        _learn(index, emb, docs, queries, qrels, budget=3, scorer=inverted,
               audit=f"qrels:{audit}")


def test_the_audit_auc_is_named_with_its_pair_set(tmp_path):
    """One name per quantity: the audit's AUC is "audit AUC", and its pair set (the audited
    queries' judged documents and their unjudged base top-10) is printed and stored beside
    it, so that it is never read as eval's "reward AUC" (the rewarded pairs)."""
    from tttembed.ttt.audit import audit_line

    index, emb, docs, queries, qrels = _task(tmp_path, "harmful")
    audit = _audit_file(tmp_path / "positives.tsv", qrels)  # one relevant document each
    good = _learn(index, emb, docs, queries, qrels, budget=3, audit=f"qrels:{audit}")
    a = good.audit
    assert a["name"] == "audit AUC" and a["judged"] == 6 and a["unjudged"] == a["pairs"] - 6
    assert a["pair_set"] == (f"the {a['pairs']} audit pairs: the 6 judged documents of 6 "
                             f"queries in {audit} and their {a['unjudged']} unjudged top-10 "
                             "documents of the base ranking (as non-relevant)")
    line = audit_line(a)
    assert line.startswith("audit AUC 1.000 [1.000, 1.000] on the ") and a["pair_set"] in line
    inverted = QrelsScorer("inverted", qrels={q: {d: 1 for d in docs if d not in g}
                                              for q, g in qrels.items()})
    with pytest.raises(DataError, match=r"audit AUC 0\.\d+ .* on the \d+ audit pairs: the 6 "
                                        r"judged documents of 6 queries"):
        _learn(index, emb, docs, queries, qrels, budget=3, scorer=inverted,
               audit=f"qrels:{audit}")
