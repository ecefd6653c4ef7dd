"""The dashboard's click-through section (:mod:`tttembed.serve.dashboard`): the clicks by
position over the newest searches, the learner's estimate of how often each rank is
examined, and the candidate under interleaving (:func:`clicks_table`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tttembed.serve.cells import as_map, esc, exact, plain, real


def _window(searches: Any) -> str:
    """The note on what click-through is read over ("" when the status does not say)."""
    return f"; rates over the newest {int(searches):,} searches" if real(searches) else ""


def clicks_table(status: Mapping[str, Any]) -> str:
    """Click-through by position (``clicks.ctr_by_rank``). Its values are not loop-wide
    ``data-field``s: the section carries ``data-events`` and ``data-clicks``, each rank's
    ``<tr data-rank="R">`` its ``data-impressions``, ``data-clicks`` and ``data-ctr`` (exact,
    as ``data-value`` is)."""
    clicks = as_map(status.get("clicks"))
    ranks = [as_map(r) for r in clicks.get("ctr_by_rank") or () if isinstance(r, Mapping)]
    head = (f'<section data-events="{esc(exact(clicks.get("events")))}" '
            f'data-clicks="{esc(exact(clicks.get("clicks")))}">'
            '<h2>Click-through by position</h2><p class="note">'
            f'{plain(clicks.get("events"))} events, {plain(clicks.get("clicks"))} clicks'
            f'{_window(clicks.get("ctr_window_searches"))}</p>')
    if not any(real(r.get("impressions")) for r in ranks):
        return head + '<p class="muted">No searches shown yet.</p></section>'
    prop = as_map(status.get("propensities"))
    theta, low, high = (list(prop.get(k) or ()) for k in ("theta", "low", "high"))
    rows = []
    for r in ranks:
        i = int(r.get("rank") or 0) - 1
        est = (f"{theta[i]:.3f} [{low[i]:.3f}, {high[i]:.3f}]"
               if 0 <= i < min(len(theta), len(low), len(high)) else "—")
        ctr = real(r.get("ctr"))
        width = 0.0 if ctr is None else 240 * min(max(ctr, 0.0), 1.0)
        attrs = "".join(f' data-{k}="{esc(exact(r.get(k)))}"'
                        for k in ("impressions", "clicks", "ctr"))
        rows.append(f'<tr data-rank="{esc(r.get("rank"))}"{attrs}><td>{esc(r.get("rank"))}'
                    f'</td><td class="num">{plain(r.get("impressions"))}</td>'
                    f'<td class="num">{plain(r.get("clicks"))}</td><td class="num">'
                    f'{"—" if ctr is None else f"{100 * ctr:.1f}%"}</td>'
                    f'<td><span class="share" style="width:{width:.0f}px"></span></td>'
                    f'<td class="num">{esc(est)}</td></tr>')
    basis = (f'<p class="note">examined: the learner\'s propensity estimate '
             f'({esc(prop.get("method"))}, {plain(prop.get("interventions"))} interventions; '
             "5-95% bootstrap band)</p>") if theta else ""
    online = as_map(status.get("online_test"))
    test = (f'<p class="note">candidate {esc(online.get("candidate"))} under interleaving: '
            f'{esc(online.get("decision"))} after {plain(online.get("searches"))} searches '
            f'({plain(online.get("wins"))} wins, {plain(online.get("losses"))} losses)</p>'
            ) if online else ""
    return (head + basis + test + '<table><thead><tr><th>Rank</th><th class="num">Impressions'
            '</th><th class="num">Clicks</th><th class="num">CTR</th><th></th>'
            '<th class="num">Examined</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


__all__ = ["clicks_table"]
