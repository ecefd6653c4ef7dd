"""``/v1/search`` without ``task``: a server whose states and query files name one task
serves that task and says so (``task`` in the answer); naming several, it refuses with a
400 listing them; naming none, it serves the global states (``task: "_"``). Never the
global states in silence while the task states sit unused."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx")

from tests.serve.conftest import QUERIES, TASK, make_app, running  # noqa: E402

TEXT = QUERIES["q3"]


def _search(url: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/search", json={"query": TEXT, "k": 5, **body}, timeout=60)


def test_a_search_without_task_uses_the_one_task_and_says_so(setup, minilm) -> None:
    with running(make_app(setup, minilm)) as url:
        named, bare = _search(url, task=TASK).json(), _search(url)
        global_only = _search(url, task="_").json()
    assert bare.status_code == 200, bare.text
    assert bare.json()["task"] == TASK  # it used the server's one task, and says so
    assert bare.json()["data"][0]["ids"] == named["data"][0]["ids"]
    assert bare.json()["data"][0]["scores"] == named["data"][0]["scores"]
    assert global_only["task"] == "_"


def test_a_search_without_task_on_several_tasks_is_a_400_listing_them(setup, minilm,
                                                                     tmp_path) -> None:
    from tttembed.serve import create_app

    birds = tmp_path / "birds.jsonl"
    birds.write_text(json.dumps({"_id": "b1", "text": "which bird sings"}) + "\n")
    app = create_app(index=str(setup["root"] / "index"),
                     states=(str(setup["task"]),),
                     queries=(str(setup["queries"]), str(birds)), tasks=(TASK, "birds"),
                     embedder=minilm)
    with running(app) as url:
        bare, chosen = _search(url), _search(url, task="birds")
    assert bare.status_code == 400, bare.text
    error = bare.json()["error"]
    assert error["code"] == "missing_task" and error["param"] == "task"
    assert f"birds, {TASK}" in error["message"] and "'_'" in error["message"]
    assert chosen.status_code == 200 and chosen.json()["task"] == "birds"


def test_a_search_without_task_and_no_task_states_is_global(setup, minilm) -> None:
    from tttembed.serve import create_app

    app = create_app(index=str(setup["root"] / "index"), embedder=minilm)
    with running(app) as url:
        bare = _search(url)
    assert bare.status_code == 200 and bare.json()["task"] == "_"
