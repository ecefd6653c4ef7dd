"""One rule each for what an event says about who and when: an event names its session
(``session_id``, else ``client_id``; neither is a 400, never one cap shared by every
anonymous user), and its timestamp lies between 2000-01-01 and a day after the server's
clock (year 1, year 9999, epoch 0 are 400s naming the field and the value)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")

from tttembed.serve.events import parse_event  # noqa: E402
from tttembed.serve.wire import ApiError  # noqa: E402


def _click(**kw: object) -> dict[str, object]:
    return {"type": "click", "search_id": "s1", "doc_id": "d1", **kw}


@pytest.mark.parametrize("stamp", ["9999-12-31T00:00:00Z", "0001-01-01T00:00:00Z",
                                   "1999-12-31T23:59:59Z", 0, 1, 253402214400,
                                   253402214400000])
def test_a_timestamp_outside_the_sane_window_is_a_400_naming_it(stamp: object) -> None:
    """Timestamps before 2000 or more than a day ahead of the server are a 400 that names
    the field and the value (year 9999 and year 1 were accepted while -5 was refused)."""
    with pytest.raises(ApiError) as err:
        parse_event(_click(session_id="u1", timestamp=stamp), 3)
    assert err.value.status == 400 and err.value.code == "invalid_timestamp"
    assert "events[3].timestamp" in err.value.message and str(stamp) in err.value.message
    assert "2000" in err.value.message


def test_timestamps_inside_the_window_are_kept() -> None:
    now = time.time()
    assert parse_event(_click(session_id="u", timestamp=now), 0).at == pytest.approx(now)
    ms = parse_event(_click(session_id="u", timestamp=int(now * 1000)), 0).at
    assert ms == pytest.approx(now, abs=1e-3)
    assert parse_event(_click(session_id="u", timestamp="2026-01-02T03:04:05Z"), 0).at > 0


def test_an_event_without_a_session_or_client_is_a_400() -> None:
    """An event with neither ``session_id`` nor ``client_id`` is a 400 (it shared one click
    cap per search with every other anonymous event); ``client_id`` alone is its session."""
    with pytest.raises(ApiError) as err:
        parse_event(_click(), 2)
    assert err.value.status == 400 and "events[2]" in err.value.message
    assert "session_id" in err.value.message and "client_id" in err.value.message
    ubi = {"action_name": "click", "query_id": "s1",
           "event_attributes": {"object": {"object_id": "d1"}}}
    with pytest.raises(ApiError):
        parse_event(ubi, 0)
    kept = parse_event(_click(client_id="browser-7"), 0)
    assert (kept.session, kept.client) == ("browser-7", "browser-7")
