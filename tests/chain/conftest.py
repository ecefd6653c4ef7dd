"""A tiny multi-hop dataset written to disk, and its frozen MiniLM index."""

from __future__ import annotations

import json

import pytest

DOCS = {
    "p1": ("Ada Marlow", "Ada Marlow is a painter born in the town of Kestrel Bay."),
    "p2": ("Kestrel Bay", "Kestrel Bay is a fishing town on the coast of Norland."),
    "p3": ("Norland", "Norland is a small country whose capital is Velmar."),
    "p4": ("Tomas Reed", "Tomas Reed is a poet who studied at Orchid College."),
    "p5": ("Orchid College", "Orchid College was founded by the engineer Lena Voss."),
    "p6": ("Lena Voss", "Lena Voss was an engineer who built bridges in Velmar."),
    "p7": ("Green Harbor", "Green Harbor is a port city known for its lighthouse."),
    "p8": ("Marble Hill", "Marble Hill is a district with a famous stone quarry."),
    "p9": ("River Ost", "The River Ost flows through three valleys into the sea."),
    "p10": ("Silver Lake", "Silver Lake is a lake where painters gather in summer."),
    "p11": ("Velmar Opera", "The Velmar Opera house opened in the nineteenth century."),
    "p12": ("Quarry Workers", "Quarry workers cut marble for statues and bridges."),
}

CHAINS = [
    ("q1", "In which country is the birthplace of the painter Ada Marlow?", ["p1", "p2", "p3"]),
    ("q2", "Who founded the college where the poet Tomas Reed studied?", ["p4", "p5"]),
    ("q3", "What did the founder of Orchid College build?", ["p5", "p6"]),
    ("q4", "Which town is Ada Marlow from and what coast is it on?", ["p1", "p2"]),
]


def write_dataset(root, split: str = "test") -> None:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for did, (title, text) in DOCS.items():
            fh.write(json.dumps({"_id": did, "title": title, "text": text}) + "\n")
    for name in {split, "train"}:
        with open(root / f"chains_{name}.jsonl", "w", encoding="utf-8") as fh:
            for qid, question, chain in CHAINS:
                fh.write(json.dumps({"qid": qid, "question": question, "chain": chain,
                                     "type": "bridge", "answer": "x"}) + "\n")


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tinychain") / "tiny"
    write_dataset(root)
    return root


@pytest.fixture(scope="session")
def tiny_loaded(tiny_data, minilm, tmp_path_factory):
    """(ChainTask, IndexHandle, frozen embedder) for the tiny dataset."""
    from tttembed.chain.setup import chain_task
    from tttembed.data.chains import load_multihop
    from tttembed.embed.cache import cached
    from tttembed.index.store import open_or_build

    corpus, chains = load_multihop(tiny_data, "test")
    handle = open_or_build(corpus, tmp_path_factory.mktemp("tinyidx") / "idx", cached(minilm))
    return chain_task(chains, corpus, handle.doc_ids), handle, minilm


class Stages:
    """A recording Progress: ``totals[name]`` and ``done[name]`` (units advanced)."""

    def __init__(self):
        self.totals = {}
        self.done = {}

    def __call__(self, name, total):
        self.totals[name] = total
        self.done[name] = 0

        def advance(n):
            self.done[name] += n

        return advance


def tiny_config(**kw):
    """The short TrainConfig of the chain training tests (overrides as keywords)."""
    from tttembed.chain.train import TrainConfig

    base = dict(epochs=1, batch_size=4, max_seq_length=48, n_neg=4, seed=3)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="session")
def gold_checkpoint(tiny_loaded, tmp_path_factory):
    """(folder, TrainResult) of a one-epoch gold run on the tiny dataset, shared by the
    training tests: copy the folder before changing it."""
    import torch

    from tttembed.chain.setup import frozen_encode
    from tttembed.chain.train import train_chain

    task, index, emb = tiny_loaded
    out = tmp_path_factory.mktemp("ckpt") / "gold"
    before = torch.get_num_threads()
    torch.set_num_threads(1)       # a session fixture runs before the module pin below
    try:
        result = train_chain(task, index, frozen_encode(emb), tiny_config(regime="gold"), out)
    finally:
        torch.set_num_threads(before)
    return out, result


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One intra-op thread: on a small shared CI machine, more threads only contend
    (measured 20x slower forward/backward passes with 2 threads under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
