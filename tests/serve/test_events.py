"""``POST /v1/events`` against uvicorn on a loopback port (the store SQLite or a real
PostgreSQL): UBI and short-form events validated as a whole body, stored once, capped per
session, explicit impressions, RandPair exploration logged exactly as returned, and the
click-through-by-rank status on ``/v1/loop`` and the dashboard."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.loop.conftest import pg_url  # noqa: F401 (the PostgreSQL fixture)
from tests.pg import new_database
from tests.serve.conftest import DOCS, QUERIES, TASK, running

httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, minilm) -> Path:
    import tttembed.api as tt

    root = tmp_path_factory.mktemp("events")
    tt.index_corpus({d: {"title": "", "text": t} for d, t in DOCS.items()}, root / "index",
                    embedder=minilm)
    return root / "index"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "sqlite":
        return None  # the registry's loop.sqlite
    return new_database(request.getfixturevalue("pg_url"), "e" + uuid.uuid4().hex[:16])


@pytest.fixture
def served(index_dir, minilm, tmp_path, store_spec) -> Iterator[dict[str, Any]]:
    yield from _serve(index_dir, minilm, tmp_path, store=store_spec,
                      max_clicks_per_search=3)


def _serve(index_dir: Path, minilm: Any, tmp_path: Path, **options: Any
           ) -> Iterator[dict[str, Any]]:
    from tttembed.loop.open import open_store
    from tttembed.serve import create_app

    app = create_app(index=str(index_dir), registry=str(tmp_path / "reg"), embedder=minilm,
                     registry_poll_s=0.1, **options)
    with running(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        store = open_store(options.get("store"), tmp_path / "reg")
        try:
            yield {"client": client, "store": store}
        finally:
            store.close()


def _search(client: Any, texts: list[str], k: int = 4) -> list[dict[str, Any]]:
    r = client.post("/v1/search", json={"queries": texts, "task": TASK, "k": k})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _ubi(sid: str, doc: str, action: str = "click", **kw: Any) -> dict[str, Any]:
    attrs = {"object": {"object_id": doc, "object_id_field": "_id"},
             "position": {"ordinal": kw.pop("ordinal", 1)}, **kw.pop("attrs", {})}
    return {"application": "tests", "action_name": action, "query_id": sid,
            "client_id": "browser-1", "session_id": kw.pop("session", "sess-1"),
            "timestamp": kw.pop("timestamp", "2026-01-02T03:04:05Z"),
            "message_type": "CONVERSION", "event_attributes": attrs, **kw}


def test_events_are_validated_whole_stored_once_and_capped(served) -> None:
    client, store = served["client"], served["store"]
    hit = _search(client, [QUERIES["q1"]])[0]
    sid, ids = hit["search_id"], hit["ids"]
    unseen = next(d for d in DOCS if d not in ids)
    body = [_ubi(sid, ids[1], ordinal=2),
            _ubi(sid, ids[1], "dwell", attrs={"dwell_time": 4.5}),
            {"search_id": sid, "doc_id": ids[0], "type": "click", "dwell_ms": 0,
             "session_id": "sess-2", "timestamp": 1767323045123},
            _ubi(sid, ids[2], "add_to_cart")]
    ok = client.post("/v1/events", json=body)
    assert ok.status_code == 202, ok.text
    assert ok.json() == {"object": "events", "received": 4, "stored": 4, "duplicates": 0,
                         "capped": 0, "impressions": 0}
    again = client.post("/v1/events", json=body)
    assert again.status_code == 202 and again.json()["duplicates"] == 4 \
        and again.json()["stored"] == 0
    stored = {(e.action, e.session): e for e in store.events_after((float("-inf"), ""))}
    assert set(stored) == {("click", "sess-1"), ("dwell", "sess-1"), ("click", "sess-2"),
                           ("add_to_cart", "sess-1")}
    click = stored[("click", "sess-1")]
    assert (click.doc_id, click.rank, click.ordinal, click.client) == (ids[1], 2, 2,
                                                                       "browser-1")
    assert click.at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    assert stored[("click", "sess-2")].at == pytest.approx(1767323045.123)
    assert stored[("dwell", "sess-1")].dwell_ms == 4500.0
    assert (click.task, click.query) == (TASK, QUERIES["q1"])

    good = _ubi(sid, ids[3], session="sess-3")
    refused = {
        "unknown_search_id": (_ubi("no-such-search", ids[0]), 404),
        "doc_not_shown": (_ubi(sid, unseen), 422),
        "invalid_events": ({"search_id": sid, "doc_id": ids[0], "type": "hover"}, 400),
        "invalid_timestamp": (_ubi(sid, ids[0], timestamp="yesterday"), 400)}
    for code, (event, status) in refused.items():
        r = client.post("/v1/events", json=[good, event])
        assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    for malformed in ("[]", "{\"events\": 3}", "[1]",
                      json.dumps([{"action_name": "click", "query_id": sid}]),
                      json.dumps([_ubi(sid, ids[0], ordinal=-1)])):
        r = client.post("/v1/events", content=malformed,
                        headers={"content-type": "application/json"})
        assert r.status_code == 400, (malformed, r.text)
    assert len(store.events_after((float("-inf"), ""))) == 4  # refused bodies kept nothing

    capped = client.post("/v1/events", json=[_ubi(sid, d, session="sess-9") for d in ids])
    assert capped.json()["stored"] == 3 and capped.json()["capped"] == 1  # 3 per search


def test_explicit_impressions_replace_the_served_list(served) -> None:
    client, store = served["client"], served["store"]
    hit = _search(client, [QUERIES["q2"]], k=3)[0]
    sid = hit["search_id"]
    extra = next(d for d in DOCS if d not in hit["ids"])
    shown = [extra, hit["ids"][0]]
    r = client.post("/v1/events", json={"impressions": {sid: shown},
                                        "events": [_ubi(sid, extra)]})
    assert r.status_code == 202 and r.json()["impressions"] == 1, r.text
    assert store.events_after((float("-inf"), ""))[0].rank == 1
    late = client.post("/v1/events", json=[_ubi(sid, hit["ids"][1])])
    assert late.status_code == 422 and late.json()["error"]["code"] == "doc_not_shown"
    other = client.post("/v1/events", json={"impressions": {sid: shown[::-1]}})
    assert other.status_code == 422 and other.json()["error"]["code"] == \
        "impression_conflict"
    same = client.post("/v1/events", json={"impressions": {sid: shown}})
    assert same.status_code == 202 and same.json()["impressions"] == 0
    unknown = client.post("/v1/events", json={"impressions": {sid: ["nope"]}})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_doc_id"
    hit2 = _search(client, [QUERIES["q3"]], k=3)[0]
    client.post("/v1/events", json=[_ubi(hit2["search_id"], hit2["ids"][0])])
    after = client.post("/v1/events", json={"impressions": {hit2["search_id"]: [extra]}})
    assert after.status_code == 422 and after.json()["error"]["code"] == \
        "impression_conflict"


def test_loop_status_and_dashboard_show_click_through_by_rank(served) -> None:
    client = served["client"]
    hits = _search(client, [QUERIES[q] for q in ("q1", "q2", "q3")], k=3)
    client.post("/v1/events", json=[_ubi(h["search_id"], h["ids"][0]) for h in hits[:2]]
                + [_ubi(hits[2]["search_id"], hits[2]["ids"][1])])
    clicks = client.get("/v1/loop").json()["clicks"]
    assert clicks["events"] == 3 and clicks["clicks"] == 3
    first = clicks["ctr_by_rank"][:4]
    assert [(r["rank"], r["impressions"], r["clicks"]) for r in first] == \
        [(1, 3, 2), (2, 3, 1), (3, 3, 0), (4, 0, 0)]
    assert first[0]["ctr"] == pytest.approx(2 / 3) and first[3]["ctr"] is None
    page = client.get("/dashboard").text
    assert '<tr data-rank="1" data-impressions="3" data-clicks="2" data-ctr="0.6666' in page


def test_randpair_swaps_one_adjacent_pair_and_logs_what_it_returned(index_dir, minilm,
                                                                     tmp_path) -> None:
    from tttembed.loop.clicks.intervention import randpair

    texts = [f"{q} number {i}" for i in range(12) for q in list(QUERIES.values())[:3]]
    for served in _serve(index_dir, minilm, tmp_path, explore=0.5):
        hits = _search(served["client"], texts, k=6)
    explored = swaps = 0
    for hit in hits:
        row = _logged(tmp_path, hit["search_id"])
        assert list(row.ids) == hit["ids"]  # the client got exactly what was logged
        rank = randpair(hit["search_id"], len(hit["ids"]), 0.5)
        scores = hit["scores"]
        inverted = [i + 1 for i in range(len(scores) - 1) if scores[i] < scores[i + 1]]
        if rank is None:
            assert row.intervention == "" and inverted == []
        else:
            explored += 1
            assert row.intervention == f"randpair:{rank}" and inverted in ([rank], [])
            swaps += inverted == [rank]
    assert 0 < explored < len(hits) and swaps > 0


def _logged(tmp_path: Path, sid: str) -> Any:
    from tttembed.loop.open import open_store

    store = open_store(None, tmp_path / "reg")
    try:
        return store.get_search(sid)
    finally:
        store.close()


def test_randpair_draws_its_fraction_reproducibly_within_the_top_ten() -> None:
    from tttembed.loop.clicks.intervention import randpair, swapped

    draws = [randpair(f"s{i}", 50, 0.2) for i in range(5000)]
    assert draws == [randpair(f"s{i}", 50, 0.2) for i in range(5000)]
    picked = [r for r in draws if r is not None]
    assert 0.18 < len(picked) / len(draws) < 0.22
    assert set(picked) == set(range(1, 10))  # pairs (1,2) .. (9,10)
    assert randpair("s1", 1, 1.0) is None and randpair("s1", 2, 1.0) == 1
    assert randpair("s1", 9, 0.0) is None
    assert swapped(["a", "b", "c"], 2) == ["a", "c", "b"]


def test_explore_settings_are_checked() -> None:
    from tttembed.core.errors import ConfigError
    from tttembed.serve import ServeConfig

    with pytest.raises(ConfigError, match="--explore needs --registry"):
        ServeConfig.from_options(index="i", explore=0.1)
    with pytest.raises(ConfigError, match=r"fraction in \[0, 1\]"):
        ServeConfig.from_options(index="i", registry="r", explore=1.5)
    with pytest.raises(ConfigError, match="max_clicks_per_search"):
        ServeConfig.from_options(index="i", max_clicks_per_search=0)


def test_the_guides_click_commands_run_as_written(served) -> None:
    """The closed-loop guide's ``clicks`` block, run by bash with curl: only the address,
    the search id and the document (the guide's demo corpus is not this index) change."""
    import shutil
    import subprocess

    from tests.test_readme import _block

    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("curl or bash is not installed")
    client = served["client"]
    hit = _search(client, [QUERIES["q4"]])[0]
    text = _block("clicks").replace("\\\n", " ")
    commands = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("curl ")]
    assert len(commands) == 3
    outputs = []
    for line in commands:
        if "| jq" in line and shutil.which("jq") is None:
            line = line.split("| jq")[0]
        line = (line.replace("localhost:8000", str(client.base_url).rstrip("/"))
                .replace("SEARCH_ID", hit["search_id"]).replace("json.dumps", hit["ids"][1]))
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, (line, done.stderr)
        outputs.append(json.loads(done.stdout))
    assert outputs[0]["stored"] == 1
    assert (outputs[1]["stored"], outputs[1]["duplicates"]) == (1, 1)  # the click again
    ctr = outputs[2] if isinstance(outputs[2], list) else outputs[2]["clicks"]["ctr_by_rank"]
    assert ctr[1]["clicks"] == 1 and ctr[0]["clicks"] == 0


def test_events_without_a_registry_are_a_404(index_dir, minilm) -> None:
    from tttembed.serve import create_app

    with running(create_app(index=str(index_dir), embedder=minilm)) as url:
        r = httpx.post(f"{url}/v1/events", json=[{"search_id": "s", "doc_id": "d1",
                                                  "type": "click"}])
    assert r.status_code == 404 and r.json()["error"]["code"] == "loop_disabled"


def test_the_clicks_panel_renders_whatever_the_status_holds() -> None:
    from tttembed.serve.dashboard import render_dashboard

    assert "No searches shown yet" in render_dashboard({})
    assert "No searches shown yet" in render_dashboard({"clicks": {"ctr_by_rank": "x"}})
    page = render_dashboard({"clicks": {"events": 2, "clicks": 1, "ctr_by_rank": [
        {"rank": 1, "impressions": 4, "clicks": 1, "ctr": 0.25},
        {"rank": 2, "impressions": 0, "clicks": 0, "ctr": None}, "junk"]}})
    assert '<tr data-rank="1" data-impressions="4" data-clicks="1" data-ctr="0.25">' in page
    assert '25.0%' in page and 'data-rank="2" data-impressions="0" data-clicks="0" ' \
        'data-ctr="null"' in page
    assert '<section data-events="2" data-clicks="1">' in page


def test_serve_explore_flag_is_checked_on_the_command_line() -> None:
    from typer.testing import CliRunner

    from tttembed.cli import app

    runner = CliRunner()
    lone = runner.invoke(app, ["serve", "--index", "idx", "--explore", "0.1"])
    assert lone.exit_code == 1 and "--explore needs --registry" in lone.output, lone.output
    over = runner.invoke(app, ["serve", "--index", "idx", "--explore", "2"])
    assert over.exit_code == 2 and "--explore" in over.output, over.output
