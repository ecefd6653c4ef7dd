"""Many task states in one ``tttembed serve --registry DIR``: /v1/search p50 and RSS with
N task states against one state and none.

    python benchmarks/bench_loop_states.py DATA --index I [--many-states 10000] [--rounds 10]

A registry version holding N task-wise states (random unit vectors, keys ``task-i``) is
served, and the server's RSS and the p50 of /v1/search for one task (cached query
vectors, so the lookup is not hidden behind the model) are compared with a server holding
one task state and one holding none, in interleaved rounds of 50 sequential requests.
Goal (this benchmark's threshold): p50 with N states <= 1.1x the p50 with one state (the
lookup must not grow with the number of states); the ratio to no state at all (the
adaptation's own cost included) and the RSS are reported. The gain of the closed loop
itself is ``bench_loop_gain.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from _loop_support import (
    CHILDREN,
    Api,
    Server,
    load_data,
    parser,
    run,
    server_env,
    spawn_serve,
)
from _support import pct, proc_status, wait_healthy, write_json
from claims import Goal, check, emit

GOALS = {
    "states_p50": Goal("loop: /v1/search p50 with N task states / with one", "<=", 1.1),
    "states_p50_none": Goal("loop: /v1/search p50 with N task states / with none", "info",
                            None),
    "states_rss": Goal("loop: server RSS with N task states - with none", "info", None,
                       " MiB"),
}


def state_registry(index_path: Path, root: Path, keys: Sequence[str], seed: int) -> Path:
    """A registry whose served version holds one task-wise state per key (none without
    keys): random unit vectors, alpha 0.5."""
    from tttembed.adapt.state import AdaptState
    from tttembed.index.store import load_index
    from tttembed.registry.versions import Registry

    index = load_index(index_path)
    fp = str(index.manifest.get("corpus_fingerprint", ""))
    reg = Registry(root, create=True, index={"identity": index.identity,
                                             "corpus_fingerprint": fp, "index": str(index_path)})
    n = len(keys)
    if n:
        v = np.random.default_rng(seed).normal(size=(n, index.dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        state = AdaptState("task", tuple(keys), v, np.full(n, 0.5), np.ones(n, np.int64),
                           index.identity, index.dim, corpus_fingerprint=fp)
        reg.promote(reg.register(state, parent=None, reason=f"{n} task states").name)
    return root


def timed_rounds(servers: dict[str, Server], texts: list[str], task: str, rounds: int,
                 per_round: int) -> dict[str, list[float]]:
    """Sequential single-query searches, the servers interleaved round by round."""
    apis = {name: Api(s.url, task) for name, s in servers.items()}
    for api in apis.values():  # warm: every text's vector into the server's cache
        for i, t in enumerate(texts):
            s = api.search(str(i), t, "warm", 0, "?", False)
            if not s.ok:
                raise SystemExit(f"search failed: {s.error}")
    lat: dict[str, list[float]] = {name: [] for name in servers}
    for r in range(rounds):
        for name, api in apis.items():
            for i in range(per_round):
                t = texts[(r * per_round + i) % len(texts)]
                s = api.search(str(i), t, "timed", 0, "?", False)
                lat[name].append(s.latency if s.ok else float("nan"))
    return lat


def start_servers(args: argparse.Namespace, work: Path, sizes: dict[str, list[str]]
                  ) -> dict[str, Server]:
    """One server per registry (all started, then each awaited: they load at once)."""
    started = {}
    for i, (name, keys) in enumerate(sizes.items()):
        reg = state_registry(args.index, work / f"reg-{name}", keys, args.seed)
        started[name] = (reg, *spawn_serve(args.index, reg, work, [], f"serve-{name}",
                                           args.port + i if args.port else 0))
    servers = {}
    for name, (reg, proc, url) in started.items():
        servers[name] = Server(proc, url, reg, server_env(work / "cache"))
        wait_healthy(url, proc, 300, work / f"serve-{name}.log")
    return servers


def measure(args: argparse.Namespace, work: Path) -> int:
    data = load_data(args.data, args.split)
    n = args.many_states
    task = "task-7" if n > 7 else "task-0"
    sizes = {"none": [], "one": [task], f"{n}": [f"task-{i}" for i in range(n)]}
    servers: dict[str, Server] = {}
    try:
        servers = start_servers(args, work, sizes)
        texts = sorted(data.queries.values())[:200]
        lat = timed_rounds(servers, texts, task, args.rounds, 50)
        rss = {name: proc_status("VmRSS", s.proc.pid) / 1024 for name, s in servers.items()}
    finally:
        for s in servers.values():
            CHILDREN.stop(s.proc)
    p50 = {name: float(np.nanmedian(v)) * 1000 for name, v in lat.items()}
    print(f"/v1/search for task {task!r}, cached query vectors, {args.rounds} interleaved "
          f"rounds of 50 sequential requests per server:")
    for name in servers:
        print(f"  {name:>6} task states: p50 {p50[name]:6.2f} ms  p99 "
              f"{pct([x for x in lat[name] if x == x], 99):6.2f} ms  RSS {rss[name]:7.1f} MiB")
    measured: dict[str, float | None] = {"states_p50": p50[f"{n}"] / p50["one"],
                                         "states_p50_none": p50[f"{n}"] / p50["none"],
                                         "states_rss": rss[f"{n}"] - rss["none"]}
    print(f"  p50 {n} states / none = {measured['states_p50_none']:.3f}, / one = "
          f"{measured['states_p50']:.3f}; RSS +{measured['states_rss']:.1f} MiB")
    GOALS["states_p50"] = Goal(f"loop: /v1/search p50 with {n} task states / with one",
                               "<=", 1.1)
    GOALS["states_p50_none"] = Goal(f"loop: /v1/search p50 with {n} task states / with "
                                    "none", "info", None)
    ok = check(GOALS, measured)
    emit({k: GOALS[k] for k in measured}, measured, note=data.name)
    write_json(args.json, {"task": data.name, "states": n, "p50_ms": p50, "rss_mib": rss,
                           "measured": measured})
    return 0 if all(ok) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--many-states", type=int, default=10_000, metavar="N",
                    help="task states in the served version")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 50 "
                    "requests a server")
    return run(ap.parse_args(argv), measure)


if __name__ == "__main__":
    sys.exit(main())
