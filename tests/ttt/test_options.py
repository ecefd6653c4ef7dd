"""``LearnOptions``: the learn settings as one frozen object, checked on construction with
the messages ``tttembed learn`` has always printed, its defaults those of ``tt.learn``."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from tttembed.core.errors import ConfigError
from tttembed.ttt.learn import learn
from tttembed.ttt.options import LearnOptions, Provenance


def test_defaults_are_those_of_the_public_learn():
    params = inspect.signature(learn).parameters
    fields = dataclasses.fields(LearnOptions)
    assert len(fields) == 15
    for f in fields:
        assert f.name in params, f.name  # every option is a keyword of tt.learn
        assert params[f.name].default == f.default, f.name
        assert params[f.name].kind is inspect.Parameter.KEYWORD_ONLY, f.name


def test_frozen_keyword_only_and_alpha_held_parsed():
    o = LearnOptions(alpha=" AUTO ")
    assert o.alpha == "auto" and o.validates
    assert LearnOptions(alpha="0.3").alpha == 0.3
    assert not LearnOptions().validates and LearnOptions(method="auto").validates
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.scope = "query"  # type: ignore[misc]
    with pytest.raises(TypeError):
        LearnOptions("task")  # type: ignore[misc]
    assert dataclasses.replace(o, scope="query").alpha == "auto"
    assert Provenance() == Provenance(scorer="", reward_mapping="", budget=0)


@pytest.mark.parametrize(("options", "message"), [
    ({"scope": "bad"},
     "unknown scope 'bad'; choose one of: global, task, query, adapter, neighbour"),
    ({"objective": "bad"}, "unknown objective 'bad'; choose one of: kd, rkl, grpo"),
    ({"alpha": "oracle"}, "unknown alpha 'oracle'; choose rule, auto or a number in [0, 1]"),
    ({"alpha": 1.5}, "alpha 1.5 must lie in [0, 1] (or be rule / auto)"),
    ({"method": "foo"}, "unknown method 'foo'; choose one of: scope, auto"),
    ({"allocation": "x"}, "unknown allocation 'x'; choose from waterfill, active"),
    ({"folds": 1}, "cross-validation folds must be 0 (none) or at least 2, got 1"),
    ({"folds": -2}, "cross-validation folds must be 0 (none) or at least 2, got -2"),
    ({"method": "auto", "alpha": 0.3},
     "--alpha applies to --method scope: method auto validates each state at its rule alpha "
     "(drop --alpha, or use --method scope)"),
    ({"alpha": "auto", "folds": 0},
     "alpha auto is chosen by cross-validation: give at least 2 folds"),
    ({"method": "auto", "folds": 0},
     "method auto is chosen by cross-validation: give at least 2 folds"),
])
def test_each_bad_value_is_refused_with_its_message(options, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        LearnOptions(**options)


def test_the_first_bad_value_is_reported_in_the_order_learn_always_checked():
    with pytest.raises(ConfigError, match="unknown scope"):
        LearnOptions(scope="bad", objective="bad", method="foo")
    with pytest.raises(ConfigError, match="unknown objective"):
        LearnOptions(objective="bad", alpha="oracle")
    with pytest.raises(ConfigError, match="unknown alpha"):
        LearnOptions(alpha="oracle", method="foo")
    with pytest.raises(ConfigError, match="unknown method"):
        LearnOptions(method="foo", allocation="x")
