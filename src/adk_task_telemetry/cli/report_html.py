"""A self-contained HTML lifecycle report of demo/audit runs (``--html PATH``).

One file a CI job can keep as an artifact and anyone can open offline: inline CSS
and SVG, no script, no font, no image and no URL to fetch. It renders the same
results model (``results``) as the terminal view, in the same words (``wording``): one
bar per ``tool_task`` span on its run's time axis, orphans with their tail past the
run's end and their stack, unanswered calls, and the summary table. Every outcome is
written out beside its colour, and everything that comes from a run (tool names, call
ids, stacks) is escaped.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import semconv as sc
from ..signals.stacks import display_path, import_roots, parse_frames
from .results import ENDED_OUTCOMES, TABLE_COLUMNS, Orphan, Result, Task
from .wording import fmt_duration, orphan_state, outcome_note

__all__ = ["ReportInfo", "render_report"]

#: Share of the time axis kept, right of the last end, for tails still running.
RUNNING_ZONE = 0.18
#: Narrowest bar, in percent of the lane: a task of a few microseconds stays visible.
MIN_BAR_PCT = 0.35

_TITLE = "Tool-task lifecycle report"


@dataclass(frozen=True)
class ReportInfo:
    """What the header says: how the report was made (the results say the rest)."""

    command: str                      # the command line, as typed
    versions: Mapping[str, str]       # as ``version --json``; "google-adk" is shown first
    generated: _dt.datetime           # when; shown in UTC
    exit_code: int | None = None      # the command's exit code, where known


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _wrappable(value: str) -> str:
    """Escaped, and allowed to wrap after ``_`` and ``-`` in a narrow column (print)."""
    return _e(value).replace("_", "_<wbr>").replace("-", "-<wbr>")


def _pct(frac: float) -> str:
    return f"{max(0.0, min(100.0, frac * 100)):.3f}%"


# --- the timeline ----------------------------------------------------------------


@dataclass(frozen=True)
class _Axis:
    """One run's time axis: t0 is the first task's creation, ``last`` the last end
    drawn; with orphans still running, the right RUNNING_ZONE of the lane is theirs."""

    t0: int
    last: int
    running: bool

    @classmethod
    def of(cls, tasks: Sequence[Task]) -> _Axis:
        t0 = min(t.start_ns for t in tasks)
        last = max(max(t.drawn_end_ns, _tail_end(t) or 0) for t in tasks)
        return cls(t0, max(last, t0 + 1), any(_still_running(t) for t in tasks))

    @property
    def span_s(self) -> float:
        return (self.last - self.t0) / 1e9

    @property
    def timed(self) -> float:
        """The share of the lane that is real time."""
        return 1.0 - RUNNING_ZONE if self.running else 1.0

    def x(self, ns: int) -> float:
        return (ns - self.t0) / (self.last - self.t0) * self.timed


def _still_running(t: Task) -> bool:
    return t.orphan is not None and t.orphan.still_running is True


def _tail_end(t: Task) -> int | None:
    """Where an orphan's tail ends when it is known: the span's end (the task ended
    after its run, or we cannot tell); None for a task still running."""
    if t.orphan is None or _still_running(t) or t.end_ns <= t.drawn_end_ns:
        return None
    return t.end_ns


def _axis_header(axis: _Axis) -> str:
    end = _pct(axis.timed)
    parts = ['<span class="sr">timeline</span>'
             '<svg class="axis" width="100%" height="16" aria-hidden="true">',
             '<text x="0" y="12">0</text>',
             f'<text x="{end}" y="12" text-anchor="end">'
             f'{_e(fmt_duration(axis.span_s))}</text>']
    if axis.running:
        parts.append(f'<line class="zone" x1="{end}" x2="{end}" y1="0" y2="16"/>'
                     '<text class="zone" x="100%" y="12" text-anchor="end">running</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bar_title(t: Task, axis: _Axis) -> str:
    start = fmt_duration((t.start_ns - axis.t0) / 1e9)
    text = (f"{t.tool} {t.call_id} ({t.kind}): {outcome_note(t)}; created at {start}, "
            f"ran {fmt_duration((t.drawn_end_ns - t.start_ns) / 1e9)}")
    if t.orphan is not None:
        text += (f" until its run ended ({t.orphan.trigger}); "
                 f"{orphan_state(t.orphan)}")
    return text


def _lane(t: Task, axis: _Axis) -> str:
    """One task's bar; an orphan's bar stops at its run's end, its tail goes on."""
    x0, x1 = axis.x(t.start_ns), axis.x(t.drawn_end_ns)
    if x1 - x0 < MIN_BAR_PCT / 100:  # widened to stay visible, inside the lane
        x1 = min(1.0, x0 + MIN_BAR_PCT / 100)
        x0 = x1 - MIN_BAR_PCT / 100
    cls = f"o-{_e(t.outcome)}"
    out = ['<svg class="lane" width="100%" height="20" role="img">',
           f"<title>{_e(_bar_title(t, axis))}</title>",
           f'<g class="{cls}">',
           f'<rect class="bar" x="{_pct(x0)}" y="3" width="{_pct(x1 - x0)}" height="14" rx="2"/>']
    if t.orphan is not None:
        tail_end = _tail_end(t)
        running = tail_end is None and _still_running(t)
        if running or tail_end is not None:
            x2 = 1.0 if running else axis.x(tail_end or t.end_ns)
            # A running tail ends under the arrow head drawn over the lane's right edge.
            out.append(f'<line class="tail" x1="{_pct(x1)}" x2="{_pct(x2)}" y1="10" y2="10"/>')
            if running:
                # The arrow head: a nested viewport at the lane's right edge.
                out.append('<svg class="arrow" x="100%" y="0" overflow="visible">'
                           '<polygon points="-9,4 0,10 -9,16"/></svg>')
            else:
                out.append(f'<line class="tail-end" x1="{_pct(x2)}" x2="{_pct(x2)}" '
                           'y1="5" y2="15"/>')
        out.append(f'<line class="run-end" x1="{_pct(x1)}" x2="{_pct(x1)}" y1="0" y2="20"/>')
    out.append("</g></svg>")
    return "".join(out)


def _stack(o: Orphan, roots: Sequence[str]) -> str:
    """The orphan's ``code.stacktrace``, line for line (paths shortened, the full one
    in each frame's title), with the stuck-at frame and its source line marked."""
    stuck = o.stuck_at
    out, mark_next = [], False
    for line in o.stacktrace.splitlines():
        frames = parse_frames(line)
        here = bool(frames) and stuck is not None and (
            frames[0].file, frames[0].line, frames[0].func) == (stuck.file, stuck.line,
                                                                stuck.func)
        text = _e(line)
        if frames:
            f = frames[0]
            short = line.replace(f'"{f.file}"', f'"{display_path(f.file, roots)}"', 1)
            text = (f'<span class="frame" data-file="{_e(f.file)}" title="{_e(f.file)}">'
                    f"{_e(short)}</span>")
        if here or (mark_next and not frames):
            text = f'<mark class="stuck">{text}</mark>'
        out.append(text)
        mark_next = here
    return "\n".join(out)


def _orphan_block(t: Task) -> str:
    assert t.orphan is not None
    o = t.orphan
    roots = import_roots()
    parts = [f'<div class="orphan" data-call-id="{_e(t.call_id)}">',
             f'<h4><span class="o-orphaned label">ORPHANED</span> <code>{_e(t.tool)}</code> '
             f"<code>{_e(t.call_id)}</code> ({_e(t.kind)}): {_e(orphan_state(o))}</h4>",
             f"<p>Its run ended (<code>{_e(o.trigger)}</code>) when the task was "
             f"{_e(fmt_duration(o.age_s))} old.</p>"]
    frame = o.stuck_at
    if frame is not None:
        parts.append(f'<p>Stuck at <code class="where" title="{_e(frame.file)}">'
                     f"{_e(frame.where())}</code>"
                     + (f": <code>{_e(frame.code)}</code>" if frame.code else "") + "</p>")
    if o.stacktrace:
        parts.append('<details open><summary>stack (<code>code.stacktrace</code>, innermost '
                     f'last)</summary><pre class="stack">{_stack(o, roots)}</pre></details>')
    parts.append("</div>")
    return "".join(parts)


def _unanswered(result: Result) -> str:
    rows = "".join(
        f'<tr data-call-id="{_e(u.call_id)}"><td><code>{_e(u.call_id)}</code></td>'
        f"<td><code>{_e(u.tool)}</code></td><td>{_e(u.reason)}</td>"
        f"<td><code>{_e(u.invocation_id)}</code></td></tr>"
        for u in result.unanswered)
    n = len(result.unanswered)
    return (f'<div class="unanswered"><h4>{n} unanswered call{"s" if n != 1 else ""} '
            "(function calls that got no response)</h4>"
            '<table class="unanswered"><thead><tr><th>call id</th><th>tool</th>'
            "<th>reason</th><th>invocation</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def _scenario(i: int, r: Result) -> str:
    tasks = sorted(r.tasks, key=lambda t: (t.start_ns, t.call_id))
    n = len(tasks)
    out = [f'<section class="scenario" id="scenario-{i}" data-scenario="{_e(r.name)}" '
           f'data-verdict="{_e(r.verdict)}">',
           f'<h3><code>{_e(r.name)}</code> <span class="verdict v-{_e(r.verdict)}">'
           f"{_e(r.verdict.upper())}</span></h3>",
           f'<p class="what">{_e(r.summary)} <span class="dim">· {_e(r.mode)} · {n} tool '
           f'task{"s" if n != 1 else ""} · scenario wall time '
           f"{_e(fmt_duration(r.wall_s))}</span></p>"]
    if r.failure:
        out.append(f'<p class="failure">Scenario failed: {_e(r.failure)}</p>')
    if tasks:
        axis = _Axis.of(tasks)
        out.append('<table class="timeline"><colgroup><col class="c-tool"><col class="c-call">'
                   '<col class="c-kind"><col class="c-bar"><col class="c-outcome"></colgroup>'
                   '<thead><tr><th scope="col">tool</th><th scope="col">call id</th>'
                   f'<th scope="col">kind</th><th scope="col" class="bar">{_axis_header(axis)}'
                   '</th><th scope="col">outcome</th></tr></thead><tbody>')
        for t in tasks:
            out.append(
                f'<tr class="task" data-call-id="{_e(t.call_id)}" data-tool="{_e(t.tool)}" '
                f'data-outcome="{_e(t.outcome)}"><td><code>{_wrappable(t.tool)}</code></td>'
                f"<td><code>{_wrappable(t.call_id)}</code></td><td><code>{_e(t.kind)}</code></td>"
                f'<td class="bar">{_lane(t, axis)}</td>'
                f'<td class="outcome o-{_e(t.outcome)}">{_e(outcome_note(t))}</td></tr>')
        out.append("</tbody></table>")
    else:
        out.append('<p class="dim">(no tool tasks)</p>')
    out.extend(_orphan_block(t) for t in tasks if t.orphan is not None)
    if r.unanswered:
        out.append(_unanswered(r))
    out.append("</section>")
    return "\n".join(out)


# --- the summary table -------------------------------------------------------------


def _cell(r: Result, column: str) -> str:
    """A summary cell by column name, so the table follows ``TABLE_COLUMNS``."""
    if column == "scenario":
        return r.name
    if column == "verdict":
        return r.verdict.upper()
    if column == "orphaned":
        return str(r.orphaned)
    if column in r.ended or column in ENDED_OUTCOMES:
        return str(r.ended.get(column, 0))
    value = getattr(r, column, "")
    return str(len(value)) if isinstance(value, list) else str(value)


def _summary(results: Sequence[Result]) -> str:
    cols = TABLE_COLUMNS
    head = "".join(f'<th scope="col"{" class=num" if i > 1 and c != "verdict" else ""}>'
                   f"{_e(c)}</th>" for i, c in enumerate(cols))
    rows = []
    for i, r in enumerate(results):
        cells = []
        for c in cols:
            v = _cell(r, c)
            if c == "scenario":
                cells.append(f'<th scope="row"><a href="#scenario-{i}">{_e(v)}</a></th>')
            elif c == "verdict":
                cells.append(f'<td class="verdict v-{_e(r.verdict)}">{_e(v)}</td>')
            elif c == "mode":
                cells.append(f"<td>{_e(v)}</td>")
            else:
                # A count above zero takes its outcome's colour; zeros are dimmed.
                role = (" zero" if v == "0" else f" o-{c}"
                        if c in (*ENDED_OUTCOMES, sc.Outcome.ORPHANED) else "")
                cells.append(f'<td class="num{role}">{_e(v)}</td>')
        rows.append(f'<tr data-scenario="{_e(r.name)}">{"".join(cells)}</tr>')
    totals = []
    for c in cols:
        if c == "scenario":
            totals.append('<th scope="row">total</th>')
        elif c in ("mode", "verdict"):
            totals.append("<td></td>")
        else:
            values = [_cell(r, c) for r in results]
            total = sum(int(v) for v in values if v.isdigit())
            totals.append(f'<td class="num">{total}</td>')
    return ('<table class="summary"><thead><tr>' + head + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody><tfoot><tr>" + "".join(totals) + "</tr></tfoot></table>")


def _legend() -> str:
    items = "".join(
        f'<li><svg width="22" height="12" aria-hidden="true"><rect class="bar o-{o}" '
        f'width="22" height="12" rx="2"/></svg> <span class="o-{o}">'
        f'{"ORPHANED" if o == sc.Outcome.ORPHANED else o}</span></li>'
        for o in (*ENDED_OUTCOMES, sc.Outcome.ORPHANED))
    return (f'<ul class="legend">{items}<li><svg width="40" height="12" aria-hidden="true">'
            '<g class="o-orphaned"><line class="tail" x1="0" x2="31" y1="6" y2="6"/>'
            '<polygon points="31,1 40,6 31,11"/></g></svg> still running after its run ended'
            "</li></ul>"
            '<p class="dim">A bar runs from the task\'s creation (span start) to its end (span '
            "end) on its run's own time axis; an orphan's solid bar ends where its run ended "
            "(creation + <code>adk.tool_task.age</code>), its dashed tail goes on to the "
            "task's end, or with an arrow to the axis's end when the task was still running "
            "when the scenario finished.</p>")


# --- the page ----------------------------------------------------------------------

_CSS = """
:root{--ok:#1a7f37;--recovered:#0e6a80;--error:#b42318;--cancelled:#8a5a00;
--orphaned:#a2189f;--fg:#1f2328;--dim:#57606a;--line:#d0d7de;--bg:#fff;--mark:#fff3b0}
*{box-sizing:border-box}
html{-webkit-print-color-adjust:exact;print-color-adjust:exact}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
color:var(--fg);background:var(--bg);margin:0 auto;padding:18px 24px;max-width:1280px}
code,pre,.where{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;
font-size:12.5px}
h1{font-size:20px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;
border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:0 0 2px}h4{font-size:13.5px;margin:10px 0 2px;font-weight:600}
p{margin:4px 0}.dim{color:var(--dim)}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%)}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:1px 14px;margin:6px 0 10px}
dl.meta dt{color:var(--dim)}dl.meta dd{margin:0}
.headline{font-weight:600;font-size:15px;margin:8px 0}
section.scenario{border:1px solid var(--line);border-radius:6px;padding:10px 14px;
margin:12px 0;break-inside:avoid}
table{border-collapse:collapse}
table.timeline{width:100%;table-layout:fixed;margin-top:6px}
table.timeline th,table.timeline td{padding:1px 6px;text-align:left;vertical-align:middle}
table.timeline td:nth-child(-n+2){overflow-wrap:anywhere}
table.timeline thead th{font-weight:normal;color:var(--dim);font-size:12px}
col.c-tool{width:15%}col.c-call{width:13%}col.c-kind{width:9%}col.c-outcome{width:21%}
td.bar,th.bar{padding:0 2px}
svg{display:block;overflow:visible}
svg.axis text{font-size:11px;fill:var(--dim)}svg.axis text.zone{fill:var(--orphaned)}
svg.axis line.zone{stroke:var(--orphaned);stroke-dasharray:2 2}
.o-ok{--c:var(--ok)}.o-recovered{--c:var(--recovered)}.o-error{--c:var(--error)}
.o-cancelled{--c:var(--cancelled)}.o-orphaned{--c:var(--orphaned)}
rect.bar{fill:var(--c)}
g.o-orphaned rect.bar{fill:var(--c);stroke:#000;stroke-width:1}
line.tail{stroke:var(--c);stroke-width:3;stroke-dasharray:5 3}
line.tail-end{stroke:var(--c);stroke-width:2}
line.run-end{stroke:var(--fg);stroke-width:1.5;stroke-dasharray:2 2}
g.o-orphaned polygon,svg.arrow polygon{fill:var(--orphaned)}
td.outcome,span.o-ok,span.o-recovered,span.o-error,span.o-cancelled,span.o-orphaned{
color:var(--c);font-weight:600}
td.o-orphaned,span.o-orphaned{text-transform:none;letter-spacing:.02em}
.orphan{border-left:4px solid var(--orphaned);padding:2px 0 2px 10px;margin:10px 0 4px}
pre.stack{background:#f6f8fa;border:1px solid var(--line);border-radius:4px;padding:6px 8px;
margin:4px 0;white-space:pre-wrap;word-break:break-all;font-size:12px}
mark.stuck{background:var(--mark);color:#000;font-weight:700;outline:1px solid #c9a400}
details summary{cursor:default;color:var(--dim);font-size:12.5px}
.failure{color:var(--error);font-weight:600}
.verdict{font-weight:700;font-size:12px;padding:1px 6px;border-radius:3px;
border:1px solid currentColor}
.v-clean{color:var(--ok)}.v-orphaned{color:var(--orphaned)}.v-failed{color:var(--error)}
.v-unanswered{color:var(--cancelled)}
table.summary th,table.summary td,table.unanswered th,table.unanswered td{
padding:3px 10px;border-bottom:1px solid var(--line);text-align:left}
table.summary .num{text-align:right;font-variant-numeric:tabular-nums}
table.summary td.zero{color:var(--dim)}
table.summary td.o-ok,table.summary td.o-recovered,table.summary td.o-error,
table.summary td.o-cancelled,table.summary td.o-orphaned{color:var(--c);font-weight:600}
table.summary td.verdict{border:0;border-bottom:1px solid var(--line);font-size:13px}
table.summary tfoot th,table.summary tfoot td{border-top:2px solid var(--fg);font-weight:600}
table.summary a{color:inherit}
ul.legend{list-style:none;padding:0;margin:10px 0 4px;display:flex;flex-wrap:wrap;gap:4px 18px}
ul.legend li{display:flex;align-items:center;gap:6px}
footer{margin-top:24px;color:var(--dim);font-size:12px}
@media print{body{padding:0;max-width:none}section.scenario{border-color:#999}
details summary{display:none}a{text-decoration:none}}
"""


def _headline(results: Sequence[Result]) -> str:
    n = len(results)
    started = sum(r.started for r in results)
    orphaned = sum(r.orphaned for r in results)
    failed = sum(r.verdict == "failed" for r in results)
    unanswered = sum(len(r.unanswered) for r in results)
    parts = [f"{n} scenario{'s' if n != 1 else ''}",
             f"{started} tool task{'s' if started != 1 else ''}"]
    cls = "v-clean"
    if orphaned:
        orph_in = sum(r.verdict == "orphaned" for r in results)
        parts.append(f"{orphaned} orphaned (in {orph_in} scenario{'s' if orph_in != 1 else ''})")
        cls = "v-orphaned"
    else:
        parts.append("no orphaned tool tasks")
    if unanswered:
        parts.append(f"{unanswered} unanswered call{'s' if unanswered != 1 else ''}")
        cls = "v-unanswered" if not orphaned else cls
    if failed:
        parts.append(f"{failed} scenario{'s' if failed != 1 else ''} failed")
        cls = "v-failed" if not orphaned else cls
    return f'<p class="headline {cls}">{_e(" · ".join(parts))}</p>'


def render_report(results: Sequence[Result], info: ReportInfo) -> str:
    """The whole page, as one string of HTML (UTF-8 when written)."""
    versions = dict(info.versions)
    adk = versions.pop("google-adk", "unknown")
    when = info.generated.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta = [("command", f"<code>{_e(info.command)}</code>"),
            ("google-adk", f"<strong>{_e(adk)}</strong>"),
            ("date", _e(when))]
    if info.exit_code is not None:
        meta.append(("exit code", _e(info.exit_code)))
    meta.extend((k, _e(v)) for k, v in versions.items())
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in meta)
    body = "\n".join(_scenario(i, r) for i, r in enumerate(results))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light">
<title>{_e(_TITLE)}: google-adk {_e(adk)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>{_e(_TITLE)}</h1>
<dl class="meta">{dl}</dl>
{_headline(results)}
</header>
<main>
<h2>Timelines</h2>
{body}
<h2 id="summary">Summary</h2>
{_summary(results)}
{_legend()}
</main>
<footer>adk-task-telemetry: every bar is one <code>tool_task</code> span read back from an
in-memory OpenTelemetry SDK; the table counts its metrics. This file fetches nothing.</footer>
</body>
</html>
"""
