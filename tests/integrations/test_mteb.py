"""MTEB, offline: MTEB's own retrieval evaluator on our (raw and adapted) vectors gives our
nDCG@10, and ``mteb:NAME`` reads the local Hugging Face cache or names what to download.

Nothing here touches the network: HF offline mode, a temporary HF_HOME, local files only.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

mteb = pytest.importorskip("mteb", reason="mteb is not installed (pip install 'tttembed[mteb]')")

from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402

import tttembed as tt  # noqa: E402
from tests.cli.test_cli import _write_beir  # noqa: E402
from tttembed.adapt.scopes import query_key  # noqa: E402
from tttembed.core.errors import ConfigError, DataError  # noqa: E402
from tttembed.embed.base import l2_normalize  # noqa: E402
from tttembed.evaluation.tasks import load_eval_task, load_mteb_task  # noqa: E402
from tttembed.integrations.mteb import MTEBModel  # noqa: E402

TASK = "TinyTTTRetrieval"
SCIFACT_REPO = "mteb/scifact"

CORPUS = {
    "d1": {"title": "Cats", "text": "Cats purr when they are content and sleep most of the day."},
    "d2": {"title": "", "text": "Dogs bark at strangers and love long walks in the park."},
    "d3": {"title": "Fish", "text": "Fish breathe water through their gills and swim in schools."},
    "d4": {"title": "Birds", "text": "Many birds migrate south in winter, flying thousands of km."},
    "d5": {"title": "Volcanoes", "text": "Volcanic eruptions release lava, ash and sulfur gases."},
    "d6": {"title": "", "text": "Earthquakes happen when tectonic plates slip along a fault."},
    "d7": {"title": "Bread", "text": "Bread dough rises because yeast produces carbon dioxide."},
    "d8": {"title": "Coffee", "text": "Coffee beans are roasted to develop their flavour."},
    "d9": {"title": "Python", "text": "Python is a programming language with dynamic typing."},
    "d10": {"title": "Rust", "text": "Rust guarantees memory safety without a garbage collector."},
    "d11": {"title": "Tides", "text": "Ocean tides are caused by the gravity of the moon."},
    "d12": {"title": "Sharks", "text": "Sharks are fish with skeletons made of cartilage."},
}
QUERIES = {
    "q1": "which pets make a purring sound",
    "q2": "animals that live in the sea",
    "q3": "what causes the ground to shake",
    "q4": "how does baking bread work",
    "q5": "safe systems programming languages",
    "q6": "why does the sea level change every day",
}
QRELS = {  # some judgments MiniLM disagrees with, so that raw nDCG@10 is not 1
    "q1": {"d1": 2, "d2": 1},
    "q2": {"d12": 2, "d11": 2, "d3": 1},
    "q3": {"d5": 2, "d6": 1},
    "q4": {"d8": 2, "d7": 1},
    "q5": {"d9": 2, "d10": 1},
    "q6": {"d11": 2, "d3": 0},
}

class WordEmbedder:
    """Deterministic bag of words and character trigrams, each a fixed random direction:
    texts that share words score high. Fast (MiniLM takes ~15 s to load on a busy CPU)."""

    spec = identity = "test:words"
    options: ClassVar[dict[str, Any]] = {}
    dim = 64

    def encode(self, texts, kind="document", progress=None):
        rows = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"[a-z]+", text.lower()):
                for feat in [w] + [w[j:j + 3] for j in range(max(len(w) - 2, 0))]:
                    seed = int.from_bytes(hashlib.sha256(feat.encode()).digest()[:8], "little")
                    rows[i] += np.random.default_rng(seed).standard_normal(self.dim)
        return l2_normalize(rows)


@pytest.fixture
def words():
    return WordEmbedder()


@pytest.fixture(autouse=True)
def _offline_hf(tmp_path, monkeypatch):
    """HF offline, with an empty HF_HOME of this test's own (and the datasets cache in it)."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    return home


def write_beir(root: Path, splits: dict[str, dict[str, dict[str, int]]] | None = None) -> Path:
    for split, qrels in (splits or {"test": QRELS}).items():
        _write_beir(root, CORPUS, QUERIES, qrels, split=split)
    return root


class TinyTask(AbsTaskRetrieval):
    """A custom MTEB retrieval task whose ``load_data`` reads the BEIR files in ``folder``."""

    folder: ClassVar[Path | None] = None
    metadata = TaskMetadata(
        name=TASK, description="A tiny local retrieval task for tttembed's offline tests.",
        reference="https://github.com/embeddings-benchmark/mteb",
        dataset={"path": "local/tiny", "revision": "local"}, type="Retrieval",
        category="t2t", modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"],
        main_score="ndcg_at_10", date=("2024-01-01", "2024-01-02"), domains=[],
        task_subtypes=[], license="cc-by-4.0", annotations_creators="derived", dialect=[],
        sample_creation="found", bibtex_citation="")

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        from datasets import Dataset

        from tttembed.data.beir import load_beir_queries, load_corpus, load_qrels

        assert self.folder is not None
        corpus = load_corpus(self.folder / "corpus.jsonl")
        queries = load_beir_queries(self.folder / "queries.jsonl")
        qrels = load_qrels(self.folder / "qrels" / "test.tsv", corpus_ids=corpus,
                           query_ids=queries)
        self.dataset = {"default": {"test": {
            "corpus": Dataset.from_list([{"id": d, **doc} for d, doc in corpus.items()]),
            "queries": Dataset.from_list([{"id": q, "text": t} for q, t in queries.items()
                                          if q in qrels]),
            "relevant_docs": qrels, "top_ranked": None}}}
        self.data_loaded = True


@pytest.fixture
def tiny_task(tmp_path, monkeypatch):
    monkeypatch.setattr(TinyTask, "folder", write_beir(tmp_path / "tiny"))
    return TinyTask()


def mteb_ndcg(model: Any, task: AbsTaskRetrieval) -> float:
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False,
                           encode_kwargs={"batch_size": 4})
    return float(result.task_results[0].scores["test"][0]["ndcg_at_10"])


def our_ndcg(words, tmp_path: Path, states=()) -> float:
    index = tt.index_corpus(CORPUS, tmp_path / "idx", embedder=words, overwrite=True)
    # the hand-made states of these tests record no corpus fingerprint: apply them anyway
    res = tt.search(index, QUERIES, k=len(CORPUS), task=TASK, states=list(states),
                    embedder=words, allow_foreign_state=True)
    return tt.run_metrics(QRELS, res.to_run(), ["ndcg@10"])["ndcg@10"]


def test_mteb_evaluator_equals_our_ndcg_raw_and_adapted(words, tiny_task, tmp_path):
    raw_model = tt.mteb_model(words)
    assert isinstance(raw_model, MTEBModel)
    raw_mteb, raw_ours = mteb_ndcg(raw_model, tiny_task), our_ndcg(words, tmp_path)
    assert raw_mteb == pytest.approx(raw_ours, abs=1e-4)

    # A task-wise state for every query and a query-wise one that overrides it for q2.
    v = words.encode(["the ocean, the moon and tides", "fish swimming"], "document")
    task_state = tt.AdaptState("task", (TASK,), v[:1], np.array([0.8]), np.array([5]),
                               identity=words.identity, dim=words.dim)
    query_state = tt.AdaptState("query", (query_key(TASK, QUERIES["q2"]),), v[1:],
                                np.array([0.9]),
                                np.array([3]), identity=words.identity, dim=words.dim)
    model = tt.mteb_model(words, states=[task_state, query_state])
    adapted_mteb = mteb_ndcg(model, tiny_task)
    adapted_ours = our_ndcg(words, tmp_path, [task_state, query_state])
    assert adapted_mteb == pytest.approx(adapted_ours, abs=1e-4)
    assert abs(adapted_ours - raw_ours) > 1e-3  # the states really move the ranking
    assert model.applied == [5, 1]  # q1, q3..q6 by the task state; q2 by its own
    assert model.mteb_model_meta.revision != raw_model.mteb_model_meta.revision
    print(f"nDCG@10 raw: mteb {raw_mteb:.6f} ours {raw_ours:.6f}; "
          f"adapted: mteb {adapted_mteb:.6f} ours {adapted_ours:.6f}")


def test_wrapper_encodes_documents_raw_and_refuses_unmatched_states(words):
    v = words.encode(["anything"], "document")
    state = tt.AdaptState("task", ("scifact",), v, np.array([0.5]), np.array([2]),
                          identity=words.identity, dim=words.dim)
    model = MTEBModel(words, state)
    batch = [{"id": ["q1"], "text": ["a question"]}]
    docs = model.encode(batch, task_metadata=TinyTask.metadata, prompt_type="document")
    np.testing.assert_allclose(docs, words.encode(["a question"], "document"))
    with pytest.raises(ConfigError, match="task=NAME"):
        model.encode(batch, task_metadata=TinyTask.metadata, prompt_type="query")
    loose = MTEBModel(words, state, require_match=False)
    raw = loose.encode(batch, task_metadata=TinyTask.metadata, prompt_type="query")
    np.testing.assert_allclose(raw, words.encode(["a question"], "query"))
    mapped = MTEBModel(words, state, task="scifact")
    moved = mapped.encode(batch, task_metadata=TinyTask.metadata, prompt_type="query")
    assert not np.allclose(moved, raw) and np.allclose(np.linalg.norm(moved, axis=1), 1)


# -- mteb:NAME from the local Hugging Face cache ---------------------------------------

def scifact_revision() -> str:
    return str(mteb.get_task("SciFact").metadata.dataset["revision"])


def fake_snapshot(home: Path, revision: str, *, main: bool = False) -> Path:
    repo = home / "hub" / f"datasets--{SCIFACT_REPO.replace('/', '--')}"
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    if main:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return snap


def test_mteb_name_not_cached_offline_names_the_dataset(_offline_hf):
    with pytest.raises(DataError) as err:
        load_eval_task("mteb:SciFact")
    msg = str(err.value)
    assert "\n" not in msg and "offline" in msg
    assert f"hf download --repo-type dataset {SCIFACT_REPO} --revision " in msg
    assert str(_offline_hf / "hub") in msg
    with pytest.raises(ConfigError, match="unknown MTEB task"):
        load_eval_task("mteb:NoSuchTaskAnywhere")
    with pytest.raises(ConfigError, match="retrieval"):
        load_eval_task("mteb:STS12")


def test_mteb_name_reads_a_cached_beir_snapshot(_offline_hf):
    train = {"q1": {"d1": 1}, "q4": {"d7": 1}}
    test = {q: g for q, g in QRELS.items() if q not in train}
    write_beir(fake_snapshot(_offline_hf, scifact_revision()), {"test": test, "train": train})
    task = load_eval_task("mteb:SciFact", train_split="train")
    assert task.name == "SciFact" and task.source == "mteb:SciFact"
    assert task.corpus == CORPUS and set(task.queries) == set(test)
    assert task.qrels == test and task.train_qrels == train
    assert set(task.train_queries) == {"q1", "q4"}


def test_mteb_name_reads_a_cached_parquet_snapshot_with_mtebs_loader(_offline_hf):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    snap = fake_snapshot(_offline_hf, "0" * 40, main=True)  # another revision, as `main`
    tables = {
        "corpus": {"_id": list(CORPUS), "title": [d["title"] for d in CORPUS.values()],
                   "text": [d["text"] for d in CORPUS.values()]},
        "queries": {"_id": list(QUERIES), "text": list(QUERIES.values())},
        "qrels": {"query-id": [q for q, docs in QRELS.items() for _ in docs],
                  "corpus-id": [d for docs in QRELS.values() for d in docs],
                  "score": [g for docs in QRELS.values() for g in docs.values()]},
    }
    configs = []
    for config, cols in tables.items():
        (snap / config).mkdir()
        pq.write_table(pa.table(cols), snap / config / "test-00000-of-00001.parquet")
        configs.append(f"- config_name: {config}\n  data_files:\n  - split: test\n"
                       f"    path: {config}/test-*")
    (snap / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n")
    task = load_mteb_task("SciFact", online=lambda: False)
    assert task.corpus == CORPUS and task.qrels == QRELS
    assert task.queries == QUERIES  # every query has a grade >= 1
    with pytest.raises(DataError, match="available splits: test"):
        load_mteb_task("SciFact", split="dev", online=lambda: False)


def test_mteb_model_checks_embedder_and_states(words, tmp_path):
    from tttembed.core.errors import StateMismatch

    index = tt.index_corpus(CORPUS, tmp_path / "idx", embedder=words)
    assert tt.mteb_model(words, index=index).embedder is words
    other = WordEmbedder()
    other.identity = "test:other"
    with pytest.raises(StateMismatch):
        tt.mteb_model(other, index=index)
    foreign = tt.AdaptState("global", ("*",), np.ones((1, words.dim), np.float32),
                            np.array([0.5]), np.array([1]), identity="test:other",
                            dim=words.dim)
    with pytest.raises(StateMismatch, match="learned for embedder"):
        tt.mteb_model(words, states=foreign)
