"""``GET /dashboard``: the closed loop's status (``GET /v1/loop``) as one self-contained
HTML page. No build step, no script, nothing fetched: inline CSS and inline SVG, and a
``<meta http-equiv="refresh">`` that reloads it every few seconds.

:func:`render_dashboard` is pure: a status mapping in, a page out. Every field may be
missing or null; every string is escaped.

Machine-readable contract (what tests and scrapers read): each value shown carries
``data-field="NAME"`` and ``data-value="EXACT"`` (strings as they are; numbers, booleans and
null as JSON: ``0.05``, ``true``, ``null``); the element's text is for people. The
loop-wide fields sit outside any row; a version's fields sit inside its
``<tr data-version="NAME">``, a state's queries served inside ``<tr data-state="NAME">``
(``raw`` included). Timeline markers are ``<g data-marker="NAME" data-kind="promoted|refused|
unknown" data-served="true|false">``; the click-through section's attributes are
:func:`tttembed.serve.click_through.clicks_table`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tttembed.serve.cells import (
    as_map,
    data_field,
    esc,
    exact,
    interval_note,
    plain,
    pvalue,
    real,
    signed,
)
from tttembed.serve.click_through import clicks_table
from tttembed.serve.timeline import is_served, marker_kind, timeline, version_rows

#: Seconds between reloads of the page.
REFRESH_SECONDS = 5
#: The loop-wide fields, in the order a status mapping lists them.
TOP_FIELDS = ("version", "learning", "idle", "pairs_judged", "judge_budget", "judge_budget_left",
              "feedback_received", "frozen", "reason", "searches", "cycles", "updated",
              "judge_audited", "rewards_in_ledger")
#: A version's evidence fields (a difference against the version served before it).
EVIDENCE_FIELDS = ("gain", "ci_low", "ci_high", "p", "queries", "validation_pairs")
#: A version's pair counts, shown as ``pairs_<name>``, and the words beside each.
PAIR_FIELDS = ("judged", "feedback", "validation", "clicks")
PAIR_WORDS = {"validation": "validation paid", "clicks": "clicks"}

_CSS = """
:root{--fg:#1f2933;--muted:#6b7785;--line:#d9dee5;--bg:#f4f6f9;--card:#fff;--green:#1a7f37;
--red:#c62828;--blue:#0b5cad;--amber:#b26a00}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1160px;margin:0 auto;padding:20px 24px 40px}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:12px 20px;margin-bottom:14px}
h1{font-size:22px;margin:0}
h2{font-size:15px;margin:0 0 10px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.meta{color:var(--muted)}
.badge{display:inline-block;padding:2px 9px;border-radius:999px;font-weight:600;font-size:12px;
border:1px solid var(--line);background:#eef1f5;color:var(--fg)}
.badge.served{background:var(--blue);border-color:var(--blue);color:#fff;font-size:14px}
.badge.on{background:#e3effc;border-color:#9cc3ee;color:var(--blue)}
.badge.live{background:#e6f4ea;border-color:#a6d4b2;color:var(--green)}
.badge.frozen{background:var(--red);border-color:var(--red);color:#fff}
.badge.ok{background:#e6f4ea;border-color:#a6d4b2;color:var(--green)}
.badge.no{background:#fdecea;border-color:#f1b0aa;color:var(--red)}
.banner{background:#b71c1c;color:#fff;border-radius:8px;padding:14px 18px;margin:0 0 16px;
font-size:16px}
.banner strong{font-size:20px;letter-spacing:.08em;margin-right:10px}
.note{color:var(--muted);margin:0 0 14px}
.cards{display:grid;grid-template-columns:2fr 1fr 1fr 1fr;gap:14px;margin-bottom:16px}
.card,section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px}
section{margin-bottom:16px}
.big{font-size:26px;font-weight:650}
.bar{height:12px;background:#e6e9ee;border-radius:6px;overflow:hidden;margin:8px 0 6px}
.fill{height:100%;background:var(--green)}
.fill.warn{background:var(--amber)}.fill.full{background:var(--red)}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:7px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.served td{background:#eef5fd}
tr.refused td{color:#4b5563}
.pos{color:var(--green);font-weight:650}.neg{color:var(--red);font-weight:650}
.muted{color:var(--muted)}
.share{display:inline-block;height:8px;background:#9cc3ee;border-radius:4px;vertical-align:middle}
.scroll{overflow-x:auto}
.legend{color:var(--muted);font-size:12px;display:flex;gap:16px;margin-top:4px}
.legend svg{vertical-align:middle;margin-right:4px}
.nw{white-space:nowrap}
td.reason{min-width:150px}
td .badge.served{font-size:11px;margin-top:3px}
"""


def _judge_badge(status: Mapping[str, Any]) -> str:
    """Audited, not audited (red), or no judge at all (``--judge none``: nothing to
    audit, ``--audit`` is refused)."""
    audited = status.get("judge_audited")
    if status.get("has_judge") is False:
        return data_field("judge_audited", audited, "no judge (clicks and labels)", "badge")
    return data_field("judge_audited", audited,
                      "judge audited" if audited is True else "judge NOT audited (no --audit)",
                      "badge live" if audited is True else "badge frozen")


def _activity(status: Mapping[str, Any]) -> str:
    """The learner's activity in one phrase (``learning`` and ``idle`` together): a
    cycle running, nothing to do, judging what is pending, or not running at all."""
    learner = as_map(status.get("learner"))
    if status.get("learning") is True:
        return "learning a new version"
    if status.get("idle") is True:
        return "idle"
    if learner.get("running") is False:
        return "learner not running"
    if status.get("idle") is None:
        return "—"
    pending = real(status.get("pending"))
    return f"judging: {pending:.0f} pairs pending" if pending else "working"


def _header(status: Mapping[str, Any]) -> str:
    served = status.get("version")
    learning, idle, frozen = status.get("learning"), status.get("idle"), status.get("frozen")
    version = data_field("version", served, esc(served) if served else "raw", "badge served")
    badges = [
        data_field("learning", learning, _activity(status), "badge on" if learning is True
                   else "badge"),
        f'<span data-field="idle" data-value="{esc(exact(idle))}" hidden></span>',  # said above
        data_field("frozen", frozen, "FROZEN" if frozen is True else "live",
               "badge frozen" if frozen is True else "badge live"),
        _judge_badge(status),
    ]
    learner = as_map(status.get("learner"))
    if learner.get("running") is False and learner.get("stopped"):
        badges.append(f'<span class="badge no">learner stopped: '
                      f'{esc(learner.get("stopped"))}</span>')
    meta = (f'cycles {data_field("cycles", status.get("cycles"))} · '
            f'searches {data_field("searches", status.get("searches"))} · '
            f'updated {data_field("updated", status.get("updated"))}')
    return (f"<header><h1>tttembed loop</h1><div>serving {version}</div>"
            f'<div>{" ".join(badges)}</div><div class="meta">{meta}</div></header>')


def _notice(status: Mapping[str, Any]) -> str:
    """The FROZEN banner with its reason when frozen; otherwise the loop's note, if any."""
    reason = status.get("reason")
    serving = status.get("serving") or {}
    if status.get("following") is False:
        error = serving.get("error") or status.get("registry_error")
        return ('<div class="banner" role="alert" data-banner="not-following"><strong>NOT '
                "FOLLOWING</strong> this server cannot follow its registry and keeps serving "
                f"{esc(serving.get('version') or 'raw')}: {esc(error or 'unknown error')}"
                "</div>")
    broken = "; ".join(str(status[k]) for k in ("registry_error", "status_error")
                       if status.get(k))
    if broken:
        return ('<div class="banner" role="alert" data-banner="broken-file"><strong>BROKEN '
                f"FILE</strong> {esc(broken)}</div>")
    if status.get("frozen") is True:
        return ('<div class="banner" role="alert" data-banner="frozen"><strong>FROZEN</strong>'
                f"no version is promoted until the loop is unfrozen: {data_field('reason', reason)}"
                "</div>")
    return f'<p class="note">Loop note: {data_field("reason", reason)}</p>'


def _budget(status: Mapping[str, Any]) -> str:
    judged, budget = status.get("pairs_judged"), status.get("judge_budget")
    spent, total = real(judged), real(budget)
    bar = '<div class="bar"></div>'
    if spent is not None and total is not None and total > 0:
        frac = min(max(spent / total, 0.0), 1.0)
        cls = "fill full" if frac >= 1.0 else ("fill warn" if frac >= 0.8 else "fill")
        bar = (f'<div class="bar" role="progressbar" aria-valuenow="{spent:g}" '
               f'aria-valuemax="{total:g}"><div class="{cls}" '
               f'style="width:{100 * frac:.1f}%"></div></div>')
    ledger = status.get("rewards_in_ledger")
    return ('<div class="card"><h2>Judge budget (pairs)</h2>'
            f'<div class="big">{data_field("pairs_judged", judged)} '
            f'<span class="muted">/ {data_field("judge_budget", budget)}</span></div>'
            '<div class="muted">paid by this loop</div>'
            f'{bar}<div>{data_field("judge_budget_left", status.get("judge_budget_left"))} left'
            f' · {data_field("rewards_in_ledger", ledger)} rewards in the ledger</div>'
            f"{_audit_cost(as_map(status.get('budget')))}</div>")


def _audit_cost(budget: Mapping[str, Any]) -> str:
    """What audits cost: pairs paid for them against their cap (``--audit-share``)."""
    paid, cap, share = (real(budget.get(k)) for k in ("audit_pairs", "audit_cap",
                                                        "audit_share"))
    if paid is None or cap is None or share is None:
        return ""
    return (f'<div class="muted">audits: {paid:.0f} of {cap:.0f} pairs ({share:g} of the '
            "budget; the audit set re-read from the ledger is free)</div>")


def _cards(status: Mapping[str, Any]) -> str:
    feedback = data_field("feedback_received", status.get("feedback_received"))
    served = sum(real(n) or 0 for n in as_map(status.get("queries_served")).values())
    promoted = sum(1 for row in version_rows(status) if row.get("promoted") is True)
    return (f'<div class="cards">{_budget(status)}'
            f'<div class="card"><h2>Feedback</h2><div class="big">{feedback}</div>'
            '<div class="muted">pairs received from users</div></div>'
            f'<div class="card"><h2>Versions</h2><div class="big">{len(version_rows(status))}</div>'
            f'<div class="muted">{promoted} promoted</div></div>'
            f'<div class="card"><h2>Queries served</h2><div class="big">{served:.0f}</div>'
            '<div class="muted">all states</div></div></div>')


def _evidence(row: Mapping[str, Any]) -> str:
    """``Δ nDCG@10 vs parent v0 +0.050 [+0.010, +0.090], p 0.003, 40 queries``."""
    ev = row.get("evidence")
    if not isinstance(ev, Mapping):
        return data_field("evidence", None, '<span class="muted">no evidence</span>')
    parent = row.get("parent")
    base = f"parent {esc(parent)}" if parent else "raw"
    lo, hi = real(ev.get("ci_low")), real(ev.get("ci_high"))
    tone = "pos" if lo is not None and lo > 0 else ("neg" if hi is not None and hi < 0 else "")
    gain = data_field("gain", ev.get("gain"), signed(ev.get("gain")), tone)
    ci = (f'[{data_field("ci_low", ev.get("ci_low"), signed(ev.get("ci_low")))}, '
          f'{data_field("ci_high", ev.get("ci_high"), signed(ev.get("ci_high")))}]'
          if lo is not None and hi is not None else
          f'<span class="muted">{esc(interval_note(ev))}</span>')
    p = data_field("p", ev.get("p"), pvalue(ev.get("p")))
    return (f'<span class="muted nw">Δ nDCG@10 vs {base}</span> <span class="nw">{gain} {ci},'
            f'</span> <span class="nw">p {p},</span> <span class="nw">'
            f'{data_field("queries", ev.get("queries"))} queries,</span> <span class="nw">'
            f'{data_field("validation_pairs", ev.get("validation_pairs"))} validation pairs'
            f'{_paid(row)}</span>{_new_questions(ev)}')


def _new_questions(ev: Mapping[str, Any]) -> str:
    """`` new questions Δ +0.020 [+0.005, +0.035], p 0.010``: the held-out population of
    the two-population check (issue 62), when the version has it; the line above is the
    asked questions'."""
    new = as_map(as_map(ev.get("populations")).get("new"))
    if not new:
        return ""
    lo, hi = real(new.get("ci_low")), real(new.get("ci_high"))
    ci = f" [{signed(lo)}, {signed(hi)}]" if lo is not None and hi is not None else ""
    return (f'<br><span class="muted nw">new questions (held out by text) Δ</span> '
            f'<span class="nw">{signed(new.get("gain"))}{ci}, p {pvalue(new.get("p"))}</span>')


def _paid(row: Mapping[str, Any]) -> str:
    """``, N paid``: of the validation pairs, those the judge was paid for (the rest
    were held already, or valued without a judge)."""
    paid = as_map(row.get("pairs")).get("validation")
    return f", {plain(paid)} paid" if paid is not None else ""


def _pairs(row: Mapping[str, Any]) -> str:
    pairs = as_map(row.get("pairs"))
    return " · ".join(f'<span class="nw">{data_field("pairs_" + name, pairs.get(name))} '
                      f'{PAIR_WORDS.get(name, name)}</span>'
                      for name in PAIR_FIELDS)


def _version_row(row: Mapping[str, Any], served: bool) -> str:
    name, kind = str(row.get("version") or "?"), marker_kind(row)
    decision = {"promoted": ("promoted", "badge ok"), "refused": ("refused", "badge no")}.get(
        kind, ("undecided", "badge"))
    serving = data_field("served", row.get("served"), "serving" if served else "",
                     "badge served" if served else "")
    classes = " ".join(c for c in ("served" if served else "", kind) if c)
    parent = row.get("parent")
    return (f'<tr data-version="{esc(name)}" class="{classes}">'
            f"<td><b>{esc(name)}</b> {serving}</td>"
            f'<td class="nw">{data_field("created", row.get("created"))}</td>'
            f'<td>{data_field("parent", parent, esc(parent) if parent else "raw")}</td>'
            f'<td>{data_field("promoted", row.get("promoted"), decision[0], decision[1])}</td>'
            f"<td>{_evidence(row)}</td><td>{_pairs(row)}</td>"
            f'<td class="num">{data_field("queries_served", row.get("queries_served"))}</td>'
            f'<td class="reason">{data_field("reason", row.get("reason"))}</td></tr>')


def _versions_table(status: Mapping[str, Any]) -> str:
    rows, served = version_rows(status), status.get("version")
    if not rows:
        return '<section><h2>Versions</h2><p class="muted">No versions registered.</p></section>'
    head = ("<tr><th>Version</th><th>Created</th><th>Parent</th><th>Decision</th>"
            "<th>Evidence (against the version served before)</th><th>Pairs</th>"
            '<th class="num">Queries served</th><th>Reason</th></tr>')
    body = "".join(_version_row(row, is_served(row, served)) for row in rows)
    return (f'<section><h2>Versions</h2><div class="scroll"><table><thead>{head}</thead>'
            f"<tbody>{body}</tbody></table></div></section>{_history(status)}")


def _history(status: Mapping[str, Any]) -> str:
    """Promotions and rollbacks, newest first: when, what, who, why."""
    rows = [as_map(h) for h in status.get("history") or () if isinstance(h, Mapping)]
    if not rows:
        return ""
    body = "".join(
        f'<tr data-history="{esc(h.get("action"))}"><td class="nw">{esc(h.get("at"))}</td>'
        f'<td>{esc(h.get("action"))}</td><td>{esc(h.get("from") or "raw")} → '
        f'{esc(h.get("version") or "raw")}</td><td>{esc(h.get("by"))}</td>'
        f'<td class="reason">{esc(h.get("reason"))}</td></tr>' for h in reversed(rows))
    return ('<section><h2>History (promotions and rollbacks)</h2><table><thead><tr>'
            "<th>When</th><th>Action</th><th>Served</th><th>By</th><th>Why</th></tr></thead>"
            f"<tbody>{body}</tbody></table></section>")


def _replicas_table(status: Mapping[str, Any]) -> str:
    """What each replica reported serving in the last 30 s, and what it refused."""
    rows = [as_map(r) for r in status.get("replicas") or () if isinstance(r, Mapping)]
    if not rows:
        return ""
    served = status.get("version")

    def row(r: Mapping[str, Any]) -> str:
        refused = as_map(r.get("refused"))
        note = (f'refused {esc(refused.get("version"))}: {esc(refused.get("error"))}'
                if refused.get("version") else
                "" if r.get("following") is not False else
                f'not following: {esc(r.get("error"))}')
        lag = "" if r.get("version") == served else ' class="warn"'
        return (f'<tr data-replica="{esc(r.get("replica"))}"><td>{esc(r.get("replica"))}'
                f'</td><td{lag}>{esc(r.get("version") or "raw")}</td>'
                f'<td>{esc(r.get("generation"))}</td><td class="reason">{note}</td></tr>')

    return ('<section><h2>Replicas (reported in the last 30 s)</h2><table><thead><tr>'
            "<th>Replica</th><th>Serves</th><th>Generation</th><th>Refused / error</th>"
            f'</tr></thead><tbody>{"".join(row(r) for r in rows)}</tbody></table></section>')


def _state_order(counts: Mapping[str, Any], status: Mapping[str, Any]) -> list[str]:
    """``raw`` first, then the versions in order, then any other state by name."""
    known = ["raw"] + [str(row.get("version")) for row in version_rows(status)]
    first = [name for name in dict.fromkeys(known) if name in counts]
    return first + sorted(str(k) for k in counts if k not in first)


def _states_table(status: Mapping[str, Any]) -> str:
    counts = as_map(status.get("queries_served"))
    if not counts:
        return ('<section><h2>Queries served per state</h2>'
                '<p class="muted">No queries served yet.</p></section>')
    served = status.get("version")
    total = sum(real(n) or 0 for n in counts.values())
    rows = []
    for name in _state_order(counts, status):
        share = (real(counts[name]) or 0) / total if total > 0 else 0.0
        now = (name == served) or (name == "raw" and served is None)
        tag = ' <span class="badge served">serving</span>' if now else ""
        klass = ' class="served"' if now else ""
        rows.append(f'<tr data-state="{esc(name)}"{klass}>'
                    f"<td><b>{esc(name)}</b>{tag}</td>"
                    f'<td class="num">{data_field("queries_served", counts[name])}</td>'
                    f'<td class="num">{100 * share:.1f}%</td><td><span class="share" '
                    f'style="width:{240 * share:.0f}px"></span></td></tr>')
    return ('<section><h2>Queries served per state</h2><table><thead><tr><th>State</th>'
            '<th class="num">Queries</th><th class="num">Share</th><th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def render_dashboard(status: Mapping[str, Any]) -> str:
    """The loop's status (the ``GET /v1/loop`` mapping) as one complete HTML page."""
    served = status.get("version")
    title = f"tttembed loop: {served if served else 'raw'}"
    body = "".join((_header(status), _notice(status), _cards(status), timeline(status),
                    _versions_table(status), _replicas_table(status), _states_table(status),
                    clicks_table(status)))
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")
