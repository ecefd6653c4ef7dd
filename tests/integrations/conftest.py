"""The in-process adapters are checked on the serving tests' tiny pets index and states
(the same fixture: adapters and server must adapt identically); the framework classes
against that index served with its texts (``text_server``: ``--corpus``, so searches can
``include`` them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.serve.conftest import DOCS, make_app, running, setup  # noqa: F401  (shared)

# ruff: noqa: F811  (the fixtures imported from the serving tests)


@pytest.fixture(scope="module")
def text_server(setup, minilm) -> Iterator[str]:
    """The pets app (task-wise and query-wise states) with ``--corpus``."""
    path = setup["root"] / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                            for d, t in DOCS.items()))
    with running(make_app(setup, minilm, corpus=str(path))) as url:
        yield url


@pytest.fixture(scope="module")
def loop_server(tmp_path_factory, minilm) -> Iterator[dict[str, Any]]:
    """The pets index served with a registry (searches logged: each carries its
    ``search_id``) and its texts; yields the URL and the feedback store."""
    import tttembed.api as tt
    from tttembed.loop.open import open_store
    from tttembed.serve import create_app

    root = tmp_path_factory.mktemp("loopserve")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                              for d, t in DOCS.items()))
    tt.index_corpus({d: {"title": "", "text": t} for d, t in DOCS.items()}, root / "index",
                    embedder=minilm)
    app = create_app(index=str(root / "index"), registry=str(root / "reg"), embedder=minilm,
                     corpus=str(corpus), registry_poll_s=0.1)
    with running(app) as url:
        store = open_store(None, root / "reg")
        try:
            yield {"url": url, "store": store}
        finally:
            store.close()
