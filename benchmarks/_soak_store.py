"""The soak's view of the store under retention (``bench_soak.py --retain D
--keep-versions K``, issue 76): what the store holds as the run goes on, and the goals.

- :class:`StoreWatch` samples, every :data:`EVERY_S` seconds (a quarter of the window
  when that is shorter), the store's bytes (every
  table with its indexes and TOAST, ``pg_total_relation_size``) and the search ids
  logged since the last sample (read by ``created`` through its index, 120 s behind the
  last one seen: a search a replica held through an outage and wrote late is still
  read). Retention prunes searches older than the window, so the ids answered are
  reconciled against every id the store ever held, not only those left at the end.
- :func:`figures` adds the issue's keys: ``store_bytes`` (``after_first_window``: the
  first sample one window plus one prune interval after the soak began, when pruning
  has started to free rows; ``end``: the last sample before the soak ends),
  ``store_rows`` per table at the end, ``versions_kept`` (and why each is kept, by the
  registry's rule), ``pruned_rows`` (the store's pruned tallies: every pruner's).
"""

from __future__ import annotations

import time
from typing import Any

#: Seconds between samples.
EVERY_S = 30.0
#: The store's tables (as :data:`tttembed.loop.prune.TABLES`).
TABLES = ("searches", "events", "impressions", "interventions", "feedback", "rewards",
          "click_rewards", "reserved", "claims", "spend", "tallies", "forgotten")
#: The goal: store bytes at the end / after the first window.
BYTES_RATIO = 1.25


def store_bytes(conn: Any) -> int:
    row = conn.execute("SELECT COALESCE(SUM(pg_total_relation_size(to_regclass(t))), 0) "
                       "FROM unnest(%s::text[]) AS t", (list(TABLES),)).fetchone()
    return int(row[0])


class StoreWatch:
    """Samples the store's bytes and the search ids logged (module docstring)."""

    def __init__(self, db_url: str, every_s: float = EVERY_S) -> None:
        self.url, self.every_s = db_url, every_s
        self.ids: dict[str, tuple[str, float]] = {}
        self.bytes: list[tuple[float, int]] = []
        self._newest = -1e300
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every_s

    def sample(self) -> None:
        import psycopg

        self._last = time.monotonic()
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                self.read_ids(conn)
                self.bytes.append((time.time(), store_bytes(conn)))
        except psycopg.Error:
            pass  # PostgreSQL restarting: the next sample reads what this one missed

    def read_ids(self, conn: Any) -> None:
        rows = conn.execute("SELECT search_id, replica, created FROM searches WHERE kind = "
                            "'search' AND created >= %s", (self._newest - 120.0,)).fetchall()
        for sid, replica, created in rows:
            self.ids[str(sid)] = (str(replica), float(created))
            self._newest = max(self._newest, float(created))


def figures(watch: StoreWatch, db_url: str, registry: Any, t0: float, t1: float,
            retain_s: float, keep_versions: int, prune_every_s: float) -> dict[str, Any]:
    """The issue's keys at the end of the soak (module docstring)."""
    import psycopg

    from tttembed.registry.retention import KeepRule, prune_versions

    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in TABLES}
        pruned = {str(k): int(n) for k, n in conn.execute(
            "SELECT tkey, SUM(n) FROM tallies WHERE kind = 'pruned' GROUP BY tkey")}
    first_at = t0 + retain_s + prune_every_s
    after = next((b for t, b in watch.bytes if t >= first_at), None)
    end = next((b for t, b in reversed(watch.bytes) if t <= t1), None)
    survey = registry.survey()
    sizes = list(registry.version_bytes().values())
    kept = prune_versions(registry, KeepRule(keep_versions, retain_s), dry_run=True).kept
    reasons: dict[str, int] = {}
    for reason in kept.values():
        head = str(reason).split(":")[0]
        reasons[head] = reasons.get(head, 0) + 1
    return {"store_bytes": {"after_first_window": after, "end": end},
            "store_rows": rows, "pruned_rows": pruned,
            "versions_kept": len(survey.versions),
            "versions_kept_by_reason": reasons,
            "version_bytes": {"mean": int(sum(sizes) / len(sizes)) if sizes else None,
                              "max": max(sizes, default=None), "all": int(sum(sizes))},
            "retention": {"retain_s": retain_s, "keep_versions": keep_versions,
                          "bytes_samples": [[round(t - t0, 1), b] for t, b in watch.bytes]}}


def goal_values(f: dict[str, Any]) -> dict[str, tuple[float | None, str, float, str]]:
    """The retention goals (only with ``--retain``): bytes bounded, versions bounded."""
    if "store_bytes" not in f:
        return {}
    b = f["store_bytes"]
    ratio = b["end"] / b["after_first_window"] if b.get("end") and \
        b.get("after_first_window") else None
    k = f["retention"]["keep_versions"]
    by = f["versions_kept_by_reason"]
    # outside K: served, pinned, broken, and a candidate under an online test
    bound = k + sum(n for r, n in by.items() if r in ("served", "pinned", "candidate")
                    or r.startswith("broken"))
    return {
        "store_bytes": (ratio, "<=", BYTES_RATIO,
                        "store bytes at the end / after the first window"),
        "versions_kept": (float(f["versions_kept"] - bound), "<=", 0.0,
                          f"versions kept - (K {k} + pinned + served)"),
    }


__all__ = ["StoreWatch", "figures", "goal_values", "store_bytes"]
