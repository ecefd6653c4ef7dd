"""ServeConfig: the settings that travel together in frozen groups, built from the same flat
keywords as before (the CLI's flags, create_app's keywords)."""

from __future__ import annotations

import pytest

from tttembed.core.errors import ConfigError
from tttembed.loop.rows import ClickCaps
from tttembed.serve.config import Batching, Listen, RequestLimits, ServeConfig, ServeLoop


def test_flat_keywords_go_to_their_groups():
    config = ServeConfig.from_options(
        index="idx", states=["a.npz"], port=8123, workers=2, max_k=7, max_inputs=9,
        cache_size=0, max_wait_ms=0.5, explore=0.0, store=None, registry_poll_s=0.25,
        max_clicks_per_search=3, max_events_per_search=40, unknown_task="raw")
    assert config == ServeConfig(
        index="idx", states=("a.npz",), unknown_task="raw",
        listen=Listen(port=8123, workers=2), limits=RequestLimits(max_inputs=9, max_k=7),
        batching=Batching(cache_size=0, max_wait_ms=0.5), loop=ServeLoop(registry_poll_s=0.25),
        clicks=ClickCaps(per_search=3, events_per_search=40))
    assert ServeConfig.from_options(index="idx") == ServeConfig(index="idx")


def test_the_config_travels_to_workers_as_json_and_back():
    config = ServeConfig.from_options(index="idx", registry="reg", interleave=0.2,
                                      host="0.0.0.0", max_clicks_per_query=4)
    again = ServeConfig.from_json(config.to_json())
    assert again == config and isinstance(again.loop, ServeLoop)
    assert again.clicks == ClickCaps(per_query=4)


def test_an_unknown_keyword_is_refused():
    with pytest.raises(TypeError, match="bogus"):
        ServeConfig.from_options(index="idx", bogus=1)


def test_the_groups_are_checked_with_the_messages_of_the_flags():
    with pytest.raises(ConfigError, match="workers, max_inputs, max_body_bytes and max_query_chars must be >= 1"):
        ServeConfig.from_options(index="idx", workers=0)
    with pytest.raises(ConfigError, match="--store needs --registry"):
        ServeConfig(index="idx", loop=ServeLoop(store="x.sqlite"))
    with pytest.raises(ConfigError, match=r"max_batch \(--max-batch\) must be >= 1"):
        ServeConfig(index="idx", batching=Batching(max_batch=0))
