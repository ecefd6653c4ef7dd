"""`serve --corpus` reads the corpus once at start (trust round 5: the start-up check and
the server each read it, and `--chain` a third time)."""

from __future__ import annotations

import json

from tests.serve.conftest import DOCS, running, setup  # noqa: F401
from tests.serve.test_chain_routes import chain_setup  # noqa: F401

# ruff: noqa: F811  (the fixtures, imported)


def _counting(monkeypatch) -> list[str]:
    import tttembed.ttt.corpus as corpus_module

    reads: list[str] = []
    real = corpus_module.read_corpus

    def counted(data):
        reads.append(str(data))
        return real(data)

    monkeypatch.setattr(corpus_module, "read_corpus", counted)
    return reads


def test_the_start_check_and_the_server_share_one_read(setup, minilm, monkeypatch):
    from tttembed.serve import ServeConfig, create_app
    from tttembed.serve.run import check_serve_states

    path = setup["root"] / "corpus-once.jsonl"
    path.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                            for d, t in DOCS.items()))
    config = ServeConfig.from_options(index=str(setup["root"] / "index"), corpus=str(path))
    reads = _counting(monkeypatch)
    check_serve_states(config)  # what `serve --learn` and workers > 1 run first
    with running(create_app(config, embedder=minilm)):
        pass
    assert reads == [str(path)], reads


def test_a_chain_server_reads_its_corpus_once(chain_setup, minilm, monkeypatch):
    from tttembed.serve import ServeConfig, create_app

    config = ServeConfig.from_options(index=str(chain_setup["index"]), chain="base",
                                      corpus=str(chain_setup["data"]))
    reads = _counting(monkeypatch)
    with running(create_app(config, embedder=minilm)):
        pass
    assert len(reads) == 1, reads
