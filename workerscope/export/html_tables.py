"""The HTML report's tables and header: plain HTML around the canvas (html.py builds the data
the page draws). Every text from the timeline goes through esc()."""

from __future__ import annotations

import datetime
import html
from typing import Any

from ..timeline import Mark, Timeline
from ..units import fmt_bytes, fmt_percent, fmt_seconds
from .attribution import DIED, cpu_basis, cpu_mark
from .deaths import deaths, figures, headline
from .overhead import cost_text, costs, summary
from .stacks import is_stacks, stacks_text
from .terminal import queue_share, said_once

MAX_ROWS = 300  # rows of the per-function table
MAX_TEXT = 2_000  # characters of one span's attrs or error kept for the tooltip


# -- small helpers, html.py's too ---------------------------------------------------------------
def us(t_ns: int, origin: int) -> int:
    """A time as whole microseconds since the origin: the page's time unit."""
    return round((t_ns - origin) / 1000)


def clip(text: str) -> str:
    """At most MAX_TEXT characters, saying how many more there were."""
    text = str(text)
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}… ({len(text) - MAX_TEXT:,} more characters)"


def esc(value: Any) -> str:
    """Text for HTML: escaped, and any lone surrogate made printable so the page encodes."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(text, quote=True)


def iso(t_ns: int) -> str:
    """A time as ISO 8601 UTC to the millisecond."""
    dt = datetime.datetime.fromtimestamp(t_ns / 1e9, tz=datetime.timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- HTML parts ---------------------------------------------------------------------------------
def header(t: Timeline, title: str, data: dict[str, Any], notices: list[str],
           crept: list[str] | None = None, slow: list[str] | None = None) -> str:
    """The page's head: what the timeline holds, its cost, notes, memory creep (`crept`,
    creep_lines' sentences), the stragglers' causes (`slow`, cause_lines') and notices."""
    nw, nj, ns = data["counts"]
    dur = data["end_us"] / 1e6
    end_iso = iso(data["origin_ns"] + data["end_us"] * 1000)
    when = f"{esc(data['start'])} → {esc(end_iso)} ({esc(fmt_seconds(dur) if dur else '0 s')})"
    if not (nw or t.marks or t.jobs):
        when = "an empty timeline: nothing was recorded"
    out = [f"<header><h1>{esc(title)}</h1>",
           f"<p class=\"meta\">{when} · <b>{nw:,}</b> workers · <b>{nj:,}</b> jobs"
           f" · <b>{ns:,}</b> spans · {len(t.marks):,} marks · {len(t.samples):,} samples</p>"]
    cost = summary(t)
    if cost:
        out.append(f"<p class=\"meta\">{esc(cost)} <span class=\"hint\">(its sidecars' own "
                   f"CPU over the time they sampled, their RSS and the CPU of one sample)"
                   f"</span></p>")
    # The names come back escaped; the counts around them are our own text.
    said = said_once(t, lambda wid: f"<code>{esc(wid)}</code>")
    errors = [(wid, e) for wid, w in sorted(t.workers.items()) for e in w.errors]
    if said or errors:
        out.append("<details open><summary>Worker notes</summary><ul class=\"notes\">")
        out.extend(f"<li>{who}: {esc(n)}</li>" for who, n in said)
        out.extend(f"<li class=\"bad\"><code>{esc(wid)}</code>: error: {esc(e)}</li>"
                   for wid, e in errors)
        out.append("</ul></details>")
    share = queue_share(t)
    if share is not None:
        out.append(f"<p class=\"meta\">queued: <b>{share[0]:.0%}</b> of the jobs' time from "
                   f"submit to end was spent waiting to start ({esc(fmt_seconds(share[1]))} of "
                   f"{esc(fmt_seconds(share[2]))}, {share[3]:,} job(s) with a submit time)</p>")
    if slow:
        out.append("<ul class=\"notices stragglers\">")
        out.extend(f"<li>straggler {esc(line)}</li>" for line in slow)
        out.append("</ul>")
    if crept:
        out.append("<ul class=\"notices bad\">")
        out.extend(f"<li>{esc(line)}</li>" for line in crept)
        out.append("</ul>")
    if notices:
        out.append("<ul class=\"notices\">")
        out.extend(f"<li>{esc(n)}</li>" for n in notices)
        out.append("</ul>")
    out.append("</header>")
    return "".join(out)


def workers_html(t: Timeline, wtable: list[dict[str, Any]], data: dict[str, Any]) -> str:
    first: dict[str, int] = {}
    for s in t.spans:
        first[s.worker] = min(first.get(s.worker, s.start_ns), s.start_ns)
    for smp in t.samples:
        first[smp.worker] = min(first.get(smp.worker, smp.t_ns), smp.t_ns)
    last_us = {w[0]: w[7] for w in data["workers"]}
    origin = data["origin_ns"]
    cost = costs(t)
    out = ["<section><h2>Workers</h2><table class=\"tbl\"><thead><tr><th>worker</th><th>host</th>"
           "<th>pid</th><th>exit status</th><th>died of</th><th>jobs</th><th>failed</th>"
           "<th>frames lost</th>"
           "<th>dropped</th><th>job time</th><th>active</th><th>straggler</th>"
           + ("<th>workerscope used</th>" if cost else "") + "</tr></thead><tbody>"]
    for r in wtable:
        wid = r["worker"]
        active = (last_us.get(wid, 0) - us(first[wid], origin)) / 1e6 if wid in first else None
        bad = r["status"] in DIED or r["failed_jobs"]
        cls = " class=\"bad\"" if bad else (" class=\"slow\"" if r["straggler"] else "")
        out.append(
            f"<tr{cls}><td><code>{esc(wid)}</code></td><td>{esc(r['host'])}</td>"
            f"<td class=\"num\">{esc(r['pid'])}</td><td>{esc(r['status'])}</td>"
            f"<td>{esc(headline(r['died'])) if r['died'] else ''}</td>"
            f"<td class=\"num\">{r['jobs']:,}</td><td class=\"num\">{r['failed_jobs']:,}</td>"
            f"<td class=\"num\">{r['lost']:,}</td><td class=\"num\">{r['dropped']:,}</td>"
            f"<td class=\"num\">{esc(fmt_seconds(r['busy_s']))}</td>"
            f"<td class=\"num\">{esc(fmt_seconds(active))}</td>"
            f"<td>{'⚠ straggler' if r['straggler'] else ''}</td>"
            + (f"<td>{esc(cost_text(cost[wid])) if wid in cost else ''}</td>" if cost else "")
            + "</tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def deaths_html(t: Timeline, data: dict[str, Any]) -> str:
    """A section for the workers that died inside a job: when, of what, and the figures."""
    died = deaths(t)
    if not died:
        return ""
    origin = data["origin_ns"]
    out = ["<section><h2>Deaths</h2><p class=\"hint\">Workers that died inside a job, as the "
           "sidecar named it after the worker's pipe closed: spans still open then are drawn "
           "cut short (a ragged end) and end at the death.</p><table class=\"tbl\"><thead><tr>"
           "<th>worker</th><th>job</th><th>at</th><th>died of</th><th>what the sidecar read</th>"
           "</tr></thead><tbody>"]
    dumps = stacks_of(t)
    for d in died:
        told = f"<div>{esc(clip(d.job.error))}</div>" if d.job.error else ""
        told += f"<div class=\"figs\">{' · '.join(esc(f) for f in figures(d.job.death))}</div>"
        taken = [k for k, m in enumerate(dumps) if m.worker == d.worker and m.job == d.job.id]
        if taken:  # the stacks taken before the death (memory) or at it (a crash)
            told += "<div>" + " · ".join(
                f"<a href=\"#stacks-{k}\" class=\"stacks-link\">stacks: "
                f"{esc(clip(str((dumps[k].attrs or {}).get('reason', ''))))}</a>"
                for k in taken) + "</div>"
        out.append(f"<tr class=\"bad\"><td><code>{esc(d.worker)}</code></td>"
                   f"<td>{d.job.id} <code>{esc(d.job.name)}</code></td>"
                   f"<td class=\"num\">+{esc(fmt_seconds((d.t_ns - origin) / 1e9))}</td>"
                   f"<td><b>{esc(headline(d.cause))}</b></td><td>{told}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def stacks_of(t: Timeline) -> list[Mark]:
    """The dumps of stacks in `t`, in time order (their index is their place on the page)."""
    return sorted((m for m in t.marks if is_stacks(m)), key=lambda m: m.t_ns)


def stacks_html(t: Timeline, data: dict[str, Any]) -> str:
    """A section with each dump of stacks (a mark on the Gantt: click it to come here), the
    stacks as text, folded: asked for, a straggler's, before an OOM kill, a crash's."""
    dumps = stacks_of(t)
    if not dumps:
        return ""
    origin = data["origin_ns"]
    out = ["<section id=\"stacks\"><h2>Stacks</h2><p class=\"hint\">Every thread's Python "
           "stack, innermost frame first, as each process's faulthandler wrote it. Click a mark "
           "on the Gantt to open its dump.</p>"]
    for k, m in enumerate(dumps):
        reason = str((m.attrs or {}).get("reason", ""))
        out.append(f"<details id=\"stacks-{k}\"><summary><code>{esc(m.worker)}</code> job "
                   f"{esc(m.job)} at +{esc(fmt_seconds((m.t_ns - origin) / 1e9))}: "
                   f"{esc(clip(reason))}</summary><pre>"
                   f"{esc(stacks_text({**(m.attrs or {}), 'reason': None}))}</pre></details>")
    out.append("</section>")
    return "".join(out)


# What the CPU column is, by how its figures were got (attribution.cpu_basis).
_CPU_ESTIMATED = ("<b>CPU</b>: an estimate: the CPU read each sample (the thread's own where "
                  "calls ran side by side in threads), split over the calls by time: off by up "
                  "to one sample interval's CPU at each end of a call, so short calls that "
                  "alternate with waits read low and the waits high. ")
_CPU_HINT = {
    "": "", "estimated": _CPU_ESTIMATED,
    "measured": "<b>CPU</b>: measured: the CPU its thread used, read at each call's begin and "
                "end (the span_cpu setting). ",
    "mixed": "<b>CPU</b>: measured (span_cpu) but for the figures marked ~: "
             + _CPU_ESTIMATED.split(": ", 1)[1]}


def functions_html(rows: list[dict[str, Any]]) -> str:
    cut = any(r["cut_short"] for r in rows)
    basis = cpu_basis(rows)
    gpu = any(r.get("gpu_idle_s") is not None for r in rows)
    out = ["<section><h2>Functions</h2><p class=\"hint\">One row per span name; self = wall "
           "time minus time in child spans; memory figures are estimates attributed from "
           "the samples around each span. " + _CPU_HINT[basis] + "<b>memory grown</b>: the most "
           "the process's RSS rose above its level at a call's start during one call, i.e. "
           "what the function allocated, within 10 %; - where its samples cannot tell it from "
           "its neighbours' (a call shorter than the interval); <b>process RSS during</b>: "
           "the process's largest RSS while a call ran, "
           "which includes what it held before (a short sleep in a large process shows it "
           "all)" + ("; cut short = calls still open when their process died" if cut else "")
           + ".</p><table class=\"tbl\"><thead><tr><th>name</th>"
           "<th>kind</th><th>calls</th><th>total</th><th>self</th><th>mean</th><th>p50</th>"
           "<th>p95</th><th>max</th><th title=\""
           + ("measured at each call's edges" if basis == "measured" else
              "an estimate: the CPU read each sample, split over the calls by time")
           + "\">CPU</th><th>memory grown</th><th>process RSS during</th>"
           "<th>errors</th>"
           + ("<th>cut short</th>" if cut else "")
           + ("<th title=\"the tree's GPUs' busy share while the calls ran (its processes' SM "
              "shares)\">GPU busy</th><th title=\"GPU-seconds the tree's GPUs sat idle during "
              "the calls\">GPU idle s</th>" if gpu else "") + "</tr></thead><tbody>"]
    for r in rows[:MAX_ROWS]:
        cls = " class=\"bad\"" if r["errors"] or r["cut_short"] else ""
        out.append(
            f"<tr{cls}><td><code>{esc(r['name'])}</code></td><td>{esc(r['kind'])}</td>"
            f"<td class=\"num\">{r['calls']:,}</td>"
            + "".join(f"<td class=\"num\">{esc(fmt_seconds(r[k]))}</td>"
                      for k in ("total_s", "self_s", "mean_s", "p50_s", "p95_s", "max_s"))
            + f"<td class=\"num\">{cpu_mark(r, basis)}{esc(fmt_seconds(r['cpu_s']))}</td>"
            + f"<td class=\"num\">{esc(fmt_bytes(r['peak_growth_bytes']))}</td>"
            f"<td class=\"num\">{esc(fmt_bytes(r['peak_rss_bytes']))}</td>"
            f"<td class=\"num\">{r['errors']:,}</td>"
            + (f"<td class=\"num\">{r['cut_short']:,}</td>" if cut else "")
            + (f"<td class=\"num\">{esc(fmt_percent(r['gpu_busy_percent']))}</td>"
               f"<td class=\"num\">{esc(fmt_seconds(r['gpu_idle_s']))}</td>" if gpu else "")
            + "</tr>")
    out.append("</tbody></table>")
    if len(rows) > MAX_ROWS:
        rest = rows[MAX_ROWS:]
        out.append(f"<p class=\"note\">{len(rest):,} more names not listed "
                   f"({sum(r['calls'] for r in rest):,} calls, "
                   f"{esc(fmt_seconds(sum(r['total_s'] for r in rest)))} in total); the Chrome "
                   f"trace export has every span.</p>")
    out.append("</section>")
    return "".join(out)
