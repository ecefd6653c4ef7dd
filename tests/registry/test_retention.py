"""Registry retention (issue 76): the pure keep rule and each of its reasons, pruning a
folder and a PostgreSQL registry (dry run, a promotion between the survey and the drop,
two processes at once, a reader listing meanwhile), the backends' refusals, and pin /
unpin through the CLI."""

from __future__ import annotations

import multiprocessing
import random
import re
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.pg import database_fixtures, new_database
from tttembed.adapt.state import AdaptState
from tttembed.cli import app
from tttembed.core.errors import ConfigError, DataError, VersionInUse
from tttembed.registry.base import Survey, Version
from tttembed.registry.open import open_registry
from tttembed.registry.retention import KeepRule, VersionPrune, kept, prune_versions
from tttembed.registry.versions import Registry

DAY = 86400.0
NOW = 1_800_000_000.0  # a fixed "now" for the pure rule


def _state(seed: int) -> AdaptState:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(2, 4)).astype(np.float32)
    return AdaptState("task", ("a", "b"), v, np.full(2, 0.5), np.ones(2, np.int64),
                      identity="st:test", dim=4)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# -- the rule (pure) --------------------------------------------------------------------
def _version(n: int, created: float | None, broken: str = "") -> Version:
    manifest: dict[str, Any] = {"version": f"v{n}"}
    if created is not None:
        manifest["created"] = _iso(created)
    return Version(f"v{n}", Path(f"/nowhere/v{n}"), manifest, broken=broken)


def _promote(name: str, before: str | None, t: float) -> dict[str, Any]:
    return {"action": "promote", "version": name, "from": before, "at": _iso(t), "time": t,
            "by": "learner", "reason": ""}


def _survey() -> Survey:
    """v1..v8: v1, v2, v4, v5 promoted in that order (v5 served, replacing v4); v3 a
    refused candidate 8 days old; v6 one a day old; v7 broken; v8 the newest, old."""
    old, recent = NOW - 8 * DAY, NOW - DAY
    versions = [_version(1, old), _version(2, old), _version(3, old), _version(4, old),
                _version(5, old), _version(6, recent), _version(7, old, broken="bad json"),
                _version(8, old)]
    history = [_promote("v1", None, old + 1), _promote("v2", "v1", old + 2),
               _promote("v4", "v2", old + 3), _promote("v5", "v4", old + 4)]
    return Survey(versions, "v5", history, [])


def test_each_reason_keeps_its_version_and_an_old_refused_candidate_goes():
    got = kept(_survey(), KeepRule(keep_versions=4), ["v1"], NOW)
    assert got == {"v5": "served", "v1": "pinned", "v7": "broken: bad json",
                   "v4": "rollback target", "v8": "newest", "v2": "promoted",
                   "v6": "recent candidate"}
    assert "v3" not in got  # refused, older than the 7-day window
    # the count is for everything but served, pinned and broken: with room for three
    # (newest, rollback target, the last promoted) the recent candidate goes first
    got = kept(_survey(), KeepRule(keep_versions=3), ["v1"], NOW)
    assert "v6" not in got and got["v2"] == "promoted"


def test_only_the_last_promotions_count_and_the_window_bounds_candidates():
    survey = _survey()
    got = kept(survey, KeepRule(keep_versions=2, refused_window_s=0.5 * DAY), [], NOW)
    # the last two promoted are v5 (served) and v4 (rollback target): v2 and v1 go,
    # and v6 (a day old) is out of a half-day window
    assert set(got) == {"v5", "v4", "v7", "v8"}
    # promoting v1 again makes it the latest promotion: the last three are v1, v5, v4
    again = Survey(survey.versions, "v1", [*survey.history, _promote("v1", "v5", NOW)], [])
    got = kept(again, KeepRule(keep_versions=3, refused_window_s=0.0), [], NOW)
    assert got["v1"] == "served" and got["v5"] == "rollback target"
    assert got["v4"] == "promoted" and "v2" not in got


def test_a_candidate_under_test_and_an_unreadable_time_are_kept():
    survey = _survey()
    got = kept(survey, KeepRule(keep_versions=2, refused_window_s=0.0), [], NOW,
               candidate="v3")
    assert got["v3"] == "candidate"  # kept even when the count is full
    undated = Survey([*survey.versions, _version(9, None)], "v5", survey.history, [])
    got = kept(undated, KeepRule(keep_versions=2, refused_window_s=0.0), [], NOW)
    assert got["v9"] == "newest" and "v8" not in got
    undated = Survey([_version(9, None), _version(10, NOW)], None, [], [])
    assert kept(undated, KeepRule(refused_window_s=0.0), [], NOW + DAY)["v9"].startswith(
        "recent candidate (its creation time cannot be read")


@pytest.mark.parametrize("seed", range(30))
def test_never_the_newest_the_served_or_a_pinned_version(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    versions = [_version(i, NOW - rng.uniform(0, 30) * DAY) for i in range(1, n + 1)]
    names = [v.name for v in versions]
    history, served = [], None
    for _ in range(rng.randint(0, 30)):
        name = rng.choice(names)
        history.append(_promote(name, served, NOW))
        served = name
    pins = rng.sample(names, rng.randint(0, min(3, n)))
    rule = KeepRule(keep_versions=rng.randint(2, 4), refused_window_s=rng.uniform(0, 2) * DAY)
    got = kept(Survey(versions, served, history, []), rule, pins, NOW)
    assert names[-1] in got and all(p in got for p in pins)
    if served is not None:
        assert got[served] == "served"
    # however many versions and promotions: at most K besides served and pinned
    counted = [n for n, why in got.items() if why not in ("served", "pinned")]
    assert len(counted) <= rule.keep_versions, got
    # the last promoted fill what the newest and the rollback target leave
    promoted = list(dict.fromkeys(reversed([h["version"] for h in history])))
    room = rule.keep_versions - sum(why in ("newest", "rollback target")
                                    for why in got.values())
    fresh = [p for p in promoted if got.get(p) not in ("served", "pinned", "newest",
                                                        "rollback target")]
    assert all(p in got for p in fresh[:max(room, 0)]), (got, fresh, room)


@pytest.mark.parametrize("kw, option", [({"keep_versions": 0}, "--keep-versions"),
                                        ({"refused_window_s": -1.0}, "--keep-versions"),
                                        ({"refused_window_s": float("nan")}, "--keep-versions")])
def test_a_rule_that_keeps_nothing_is_refused_naming_the_option(kw, option):
    with pytest.raises(ConfigError, match=re.escape(option)) as exc:
        KeepRule(**kw)
    assert "\n" not in str(exc.value)


# -- a registry to prune: folder or PostgreSQL ------------------------------------------
pg_cluster, url = database_fixtures("ret_")
BACKENDS = ["folder", pytest.param("postgresql", marks=[pytest.mark.postgres,
                                                          pytest.mark.process])]


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "folder":
        Registry(tmp_path / "reg", create=True, index={"identity": "st:test"})
        return str(tmp_path / "reg")
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install "
                        "'tttembed[loop]'")
    cluster = request.getfixturevalue("pg_cluster")
    if not cluster.running:
        cluster.start()
    db = new_database(cluster.url, "ret_" + uuid.uuid4().hex[:16])
    open_registry(db, create=True, index={"identity": "st:test"},
                  cache=tmp_path / "cache").close()
    return db


def _open(spec: str, cache: Path) -> Any:
    return open_registry(spec, cache=cache)


def _fill(reg: Any, n: int, *, old: int = 0, promote: tuple[int, ...] = ()) -> None:
    """``n`` versions, the first ``old`` registered 30 days ago; ``promote``: in order."""
    for i in range(1, n + 1):
        extra = {"created": _iso(time.time() - 30 * DAY)} if i <= old else {}
        reg.register(_state(i), parent=None, reason=f"r{i}", **extra)
    for i in promote:
        reg.promote(f"v{i}", by="learner")


def test_prune_drops_what_the_rule_does_not_keep(spec, tmp_path):
    reg = _open(spec, tmp_path / "cache")
    # v1..v8 old; v1, v2, v3, v5 promoted (v5 served, replacing v3); v9, v10 recent
    _fill(reg, 10, old=8, promote=(1, 2, 3, 5))
    reg.pin("v4")
    sizes = reg.version_bytes()
    assert set(sizes) == {f"v{i}" for i in range(1, 11)} and min(sizes.values()) > 0
    rule = KeepRule(keep_versions=3)
    dry = prune_versions(reg, rule, dry_run=True)
    # three besides served (v5) and pinned (v4): the newest (v10), the rollback target
    # (v3), the last promoted left (v2); the recent candidate v9 finds no room
    assert dry.dry_run and set(dry.dropped) == {"v1", "v6", "v7", "v8", "v9"}
    assert dry.bytes_freed == sum(sizes[n] for n in dry.dropped)
    assert [v.name for v in reg.versions()] == [f"v{i}" for i in range(1, 11)]  # untouched
    assert (dry.versions_before, dry.versions_after) == (10, 5)

    done = prune_versions(reg, rule)
    assert isinstance(done, VersionPrune) and not done.dry_run
    assert done.dropped == ("v1", "v6", "v7", "v8", "v9")
    assert done.kept == {"v5": "served", "v4": "pinned", "v3": "rollback target",
                         "v10": "newest", "v2": "promoted"}
    assert done.bytes_freed == dry.bytes_freed
    assert (done.versions_before, done.versions_after) == (10, 5)
    assert [v.name for v in reg.versions()] == ["v2", "v3", "v4", "v5", "v10"]
    assert done.to_dict()["dropped"] == list(done.dropped)
    if isinstance(reg, Registry):  # nothing of a dropped folder is left, hidden or not
        assert sorted(p.name for p in (reg.root / "versions").iterdir()) == \
            ["v10", "v2", "v3", "v4", "v5"]
    # the registry still works: the served state loads, rollback returns to v3, and a new
    # version takes the next number, never a dropped one's
    assert reg.get("v5").load().keys == ("a", "b")
    assert reg.rollback()["served"] == "v3"
    assert reg.register(_state(99), parent=None).name == "v11"
    # now served v3, pinned v4; the three: newest v11, rollback target v2 (what v3
    # replaced), the last promoted v5; the refused v10 has no room left
    assert prune_versions(reg, rule).dropped == ("v10",)
    assert prune_versions(reg, rule).dropped == ()  # nothing more to drop
    reg.close()


def test_drop_refuses_the_served_pinned_newest_and_unknown_and_twice_frees_nothing(
        spec, tmp_path):
    reg = _open(spec, tmp_path / "cache")
    _fill(reg, 4, promote=(2,))
    reg.pin("v3")
    loc = reg.location
    with pytest.raises(VersionInUse, match=re.escape(f"v2 is served by registry {loc}")):
        reg.drop("v2")
    with pytest.raises(VersionInUse, match=re.escape(f"v3 is pinned in registry {loc}")):
        reg.drop("v3")
    with pytest.raises(VersionInUse, match=re.escape(f"v4 is the newest version of registry "
                                                     f"{loc}")):
        reg.drop("v4")
    with pytest.raises(ConfigError, match=re.escape("has no version 'v9'")):
        reg.drop("v9")
    with pytest.raises(ConfigError, match="not a version name"):
        reg.drop("latest")
    size = reg.version_bytes()["v1"]
    other = _open(spec, tmp_path / "cache2")  # another process's view
    assert reg.drop("v1") == size > 0
    assert other.drop("v1") == 0 and reg.drop("v1") == 0
    assert [v.name for v in other.versions()] == ["v2", "v3", "v4"]
    with pytest.raises(ConfigError, match="no version 'v1'"):
        other.promote("v1")
    with pytest.raises(ConfigError, match=re.escape("no version 'v1' any more")):
        reg._serve("v1", "promote", "user", "")  # the check under the served record's lock
    assert reg.served() == "v2"
    assert reg.unpin("v3") and not reg.unpin("v3")
    assert reg.drop("v3") > 0 and reg.pins() == []
    other.close()
    reg.close()


def test_a_version_promoted_between_the_survey_and_the_drop_is_kept(spec, tmp_path):
    reg = _open(spec, tmp_path / "cache")
    _fill(reg, 5, old=5, promote=(1,))
    sizes = type(reg).version_bytes

    def promote_meanwhile(self: Any) -> dict[str, int]:
        self.promote("v2", by="learner")  # after the survey, before the drops
        return sizes(self)

    reg.version_bytes = promote_meanwhile.__get__(reg)
    done = prune_versions(reg, KeepRule(keep_versions=2, refused_window_s=0.0))
    assert done.kept["v2"] == "served" and "v2" not in done.dropped
    assert done.dropped == ("v3", "v4")  # v1: what v2 replaced; v5 newest
    assert reg.served() == "v2" and reg.get("v2").load().keys == ("a", "b")
    reg.close()


def test_a_database_drop_removes_the_cached_copy(tmp_path, url):
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    reg = open_registry(url, create=True, cache=tmp_path / "cache")
    _fill(reg, 3)
    v1 = reg.get("v1")  # fetched into this machine's cache
    assert v1.state_path.is_file()
    assert reg.drop("v1") > 0
    assert not v1.path.exists()
    assert not [p for p in v1.path.parent.iterdir() if "dropped" in p.name]
    reg.close()


def _prune_in_child(spec: str, cache: str, go: Any, out: Any) -> None:
    reg = _open(spec, Path(cache))
    go.wait(30)
    out.put(prune_versions(reg, KeepRule(keep_versions=2, refused_window_s=0.0)).to_dict())
    reg.close()


def test_two_processes_pruning_at_once_both_succeed_and_leave_the_kept_set(spec, tmp_path):
    reg = _open(spec, tmp_path / "cache")
    _fill(reg, 30, promote=(3, 7, 11, 13))
    reg.pin("v5")
    sizes = reg.version_bytes()
    expect = {"v13", "v11", "v5", "v30"}  # served, rollback target (also among the last
    #                                       two promoted), pinned, newest: v3, v7 go
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_prune_in_child,
                         args=(spec, str(tmp_path / f"cache-{i}"), go, out))
             for i in range(2)]
    for p in procs:
        p.start()
    go.set()
    reports = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert {v.name for v in reg.versions()} == expect
    dropped = [set(r["dropped"]) for r in reports]
    assert not dropped[0] & dropped[1]  # each version dropped once, by one of them
    assert dropped[0] | dropped[1] == set(sizes) - expect
    assert sum(r["bytes_freed"] for r in reports) == sum(sizes[n] for n in set(sizes) - expect)
    assert all(set(r["kept"]) == expect and r["versions_after"] == 4 for r in reports)
    reg.close()


def test_a_reader_listing_while_pruning_never_sees_a_broken_version(spec, tmp_path):
    reg = _open(spec, tmp_path / "cache")
    _fill(reg, 40, promote=(39, 40))
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_prune_in_child,
                        args=(spec, str(tmp_path / "cache-p"), go, out))
    child.start()
    go.set()
    looks = 0
    seen: set[int] = set()
    while child.is_alive() or looks < 3:
        survey = reg.survey()
        assert survey.problems == [] and not [v for v in survey.versions if v.broken]
        listed = reg.versions()
        assert all(not v.broken and v.manifest.get("version") == v.name for v in listed)
        for v in listed if isinstance(reg, Registry) else ():
            if not v.state_path.is_file():  # gone meanwhile: all of it, never a part
                assert not v.path.exists(), f"{v.name} listed while half deleted"
        seen.add(len(listed))
        looks += 1
    report = out.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and len(report["dropped"]) == 38
    assert [v.name for v in reg.versions()] == ["v39", "v40"]
    assert looks >= 3 and max(seen) <= 40
    reg.close()


# -- pin / unpin through the CLI --------------------------------------------------------
def test_pin_and_unpin_through_the_cli(tmp_path):
    reg = Registry(tmp_path / "reg", create=True, index={"identity": "st:test"})
    _fill(reg, 3, old=3)
    root = str(reg.root)
    runner = CliRunner()
    r = runner.invoke(app, ["states", "pin", root, "v1"])
    assert r.exit_code == 0, r.output
    assert f"{root}: pinned v1 (never dropped" in r.output
    assert reg.pins() == ["v1"]
    r = runner.invoke(app, ["states", "pin", root, "v1"])
    assert r.exit_code == 0 and "v1 was pinned already: nothing changed" in r.output
    r = runner.invoke(app, ["states", "pin", root, "v9"])
    assert r.exit_code == 1 and "has no version 'v9'" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    r = runner.invoke(app, ["states", "pin", root, "latest"])
    assert r.exit_code == 1 and "not a version name: 'latest'" in r.output

    done = prune_versions(reg, KeepRule(keep_versions=2, refused_window_s=0.0))
    assert done.dropped == ("v2",) and done.kept["v1"] == "pinned"
    r = runner.invoke(app, ["states", "unpin", root, "v1"])
    assert r.exit_code == 0, r.output
    assert f"{root}: unpinned v1" in r.output and reg.pins() == []
    r = runner.invoke(app, ["states", "unpin", root, "v1"])
    assert r.exit_code == 0 and "v1 was not pinned: nothing changed (pinned: none)" in r.output
    assert prune_versions(reg, KeepRule(keep_versions=2, refused_window_s=0.0)).dropped \
        == ("v1",)


def test_a_corrupt_pins_file_is_one_line_naming_it(tmp_path):
    reg = Registry(tmp_path / "reg", create=True)
    _fill(reg, 2)
    (reg.root / "pins.json").write_text('{"pins": "v1"}')
    r = CliRunner().invoke(app, ["states", "unpin", str(reg.root), "v1"])
    assert r.exit_code == 1
    assert str(reg.root / "pins.json") in r.output and "corrupt pinned-versions" in r.output
    with pytest.raises(DataError, match="corrupt pinned-versions"):
        prune_versions(reg, KeepRule())
