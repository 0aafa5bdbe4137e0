"""The terminal view of the results model: timelines, tables, the closing lines.

Functions of the results (``results``) and a ``Style`` that return strings; the
commands print them. The only things a ``Style`` learns from outside its arguments
are the stream's own: whether it is a terminal and which glyphs it can encode
(``Style.for_stream``). The environment (``NO_COLOR``, ``TERM``) is read once, by the
dispatch, and reaches this module already folded into the colour mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO

from .. import semconv as sc
from .results import ENDED_OUTCOMES, TABLE_COLUMNS, Install, Result, exit_code
from .wording import fmt_duration, orphan_state, outcome_note

# ANSI SGR codes per role. Chosen so that orphans never share a colour with errors.
_SGR: dict[str, str] = {
    sc.Outcome.OK: "32",            # green
    sc.Outcome.RECOVERED: "36",     # cyan
    sc.Outcome.ERROR: "31",         # red
    sc.Outcome.CANCELLED: "33",     # yellow
    sc.Outcome.ORPHANED: "1;35",    # bold magenta
    "clean": "32",
    "failed": "1;31",
    "dim": "2",
    "bold": "1",
}


def colour_wanted(stream: IO[str], mode: str = "auto") -> bool:
    """``always``, ``never``, or for ``auto`` only on a terminal. The dispatch has already
    turned ``NO_COLOR`` (no-color.org) and ``TERM=dumb`` into ``never``."""
    if mode == "never":
        return False
    if mode == "always":
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _encodes(stream: IO[str], text: str) -> bool:
    enc = getattr(stream, "encoding", None) or "ascii"
    try:
        text.encode(enc)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@dataclass(frozen=True)
class Style:
    """Colour on or off, and box-drawing glyphs or their ASCII fallback."""

    colour: bool = False
    unicode: bool = True

    @classmethod
    def for_stream(cls, stream: IO[str], mode: str = "auto") -> Style:
        """The style for ``stream`` under a colour mode the dispatch resolved."""
        return cls(colour_wanted(stream, mode), _encodes(stream, "━┄▶…·─"))

    def paint(self, role: str, text: str) -> str:
        code = _SGR.get(role)
        if not self.colour or not code or not text:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"

    @property
    def bar(self) -> str:
        return "━" if self.unicode else "="

    @property
    def tick(self) -> str:
        return "┃" if self.unicode else "|"

    @property
    def still(self) -> str:
        return "┄" if self.unicode else "."

    @property
    def arrow(self) -> str:
        return "▶" if self.unicode else ">"

    @property
    def dot(self) -> str:
        return "·" if self.unicode else "-"

    @property
    def rule(self) -> str:
        return "─" if self.unicode else "-"


# --- formatting helpers --------------------------------------------------------


def _pad(text: str, width: int, visible: int | None = None) -> str:
    n = len(text) if visible is None else visible
    return text + " " * max(0, width - n)


def _clip(text: str, width: int, style: Style) -> str:
    if len(text) <= width:
        return text
    ell = "…" if style.unicode else "~"
    return text[: max(0, width - 1)] + ell


# --- the timeline --------------------------------------------------------------


def timeline(result: Result, style: Style, width: int = 100) -> str:
    """One scenario: a header, one bar per tool task, then the orphans explained."""
    out: list[str] = []
    head = style.paint("bold", result.name) + "  " + style.paint("dim", result.summary)
    out.append(head)
    if result.failure:
        out.append("  " + style.paint("failed", f"scenario failed: {result.failure}"))
    tasks = sorted(result.tasks, key=lambda t: (t.start_ns, t.call_id))
    if not tasks:
        out.append("  " + style.paint("dim", "(no tool tasks)"))
        return "\n".join(out)

    tool_w = min(18, max(4, *(len(t.tool) for t in tasks)))
    call_w = min(18, max(7, *(len(t.call_id) for t in tasks)))
    kind_w = max(4, *(len(t.kind) for t in tasks))
    notes = [outcome_note(t, style.dot) for t in tasks]
    note_w = max(len(n) for n in notes)
    label_w = 2 + tool_w + 2 + call_w + 2 + kind_w + 2
    bar_w = max(20, width - label_w - 1 - note_w)

    t0 = min(t.start_ns for t in tasks)
    t_last = max(t.drawn_end_ns for t in tasks)
    running = any(t.orphan is not None and t.orphan.still_running for t in tasks)
    span_ns = max(t_last - t0, 1)
    # Orphans still running get room to the right of the last end.
    draw_w = bar_w - (max(4, bar_w // 6) if running else 0)

    def col(ns: int) -> int:
        return min(draw_w - 1, max(0, round((ns - t0) / span_ns * (draw_w - 1))))

    total = fmt_duration(span_ns / 1e9)
    axis = "0" + " " * max(1, draw_w - 1 - len(total)) + total
    labels = (f"  {_pad('tool', tool_w)}  {_pad('call id', call_w)}  "
              f"{_pad('kind', kind_w)}  ")
    out.append(style.paint("dim", labels + axis))

    for t, note in zip(tasks, notes, strict=True):
        c0, c1 = col(t.start_ns), col(t.drawn_end_ns)
        role = t.outcome
        body = style.tick if c1 <= c0 else style.bar * (c1 - c0 + 1)
        tail = ""
        if t.orphan is not None and t.orphan.still_running:
            tail = style.still * max(1, bar_w - (c1 + 1) - 1) + style.arrow
        bar_visible = c0 + len(body) + len(tail)
        bar = " " * c0 + style.paint(role, body) + style.paint(role, tail)
        label = (f"  {_pad(_clip(t.tool, tool_w, style), tool_w)}  "
                 f"{_pad(_clip(t.call_id, call_w, style), call_w)}  {_pad(t.kind, kind_w)}  ")
        out.append(label + _pad(bar, bar_w, bar_visible) + " " + style.paint(role, note))

    for t in tasks:
        if t.stuck:
            first = t.stuck[0]
            mark = style.paint(sc.Outcome.CANCELLED, "! stuck")
            ages = ", ".join(fmt_duration(s.age_s) for s in t.stuck)
            out.append(f"  {mark} {t.tool} {t.call_id} ({t.kind}): caught while it ran, "
                       f"at {ages} old ({first.state})")
            frame = first.stuck_at
            if frame is not None:
                out.append(f"      waits at {frame.where()}")
                if frame.code:
                    out.append(f"          {style.paint('dim', frame.code)}")
        if t.orphan is None:
            continue
        o = t.orphan
        mark = style.paint(sc.Outcome.ORPHANED, "! orphan")
        out.append(f"  {mark} {t.tool} {t.call_id} ({t.kind}): {orphan_state(o)}")
        out.append(f"      its run ended ({o.trigger}) when the task was "
                   f"{fmt_duration(o.age_s)} old")
        frame = o.stuck_at
        if frame is not None:
            out.append(f"      stuck at {frame.where()}")
            if frame.code:
                out.append(f"          {style.paint('dim', frame.code)}")
    return "\n".join(out)


# --- tables --------------------------------------------------------------------

def _verdict_role(verdict: str) -> str:
    return {"orphaned": sc.Outcome.ORPHANED, "clean": "clean", "failed": "failed",
            "unanswered": sc.Outcome.CANCELLED}.get(verdict, "")


def summary_table(results: Sequence[Result], style: Style) -> str:
    """Tasks started, ended per outcome, orphaned and verdict, per scenario."""
    rows: list[list[str]] = []
    for r in results:
        rows.append([r.name, r.mode, str(r.started),
                     *(str(r.ended.get(o, 0)) for o in ENDED_OUTCOMES),
                     str(r.orphaned), str(len(r.unanswered)), r.verdict.upper()])
    totals = ["total", "", str(sum(r.started for r in results)),
              *(str(sum(r.ended.get(o, 0) for r in results)) for o in ENDED_OUTCOMES),
              str(sum(r.orphaned for r in results)),
              str(sum(len(r.unanswered) for r in results)), ""]
    widths = [max(len(c), *(len(row[i]) for row in [*rows, totals]))
              for i, c in enumerate(TABLE_COLUMNS)]
    numeric = range(2, len(TABLE_COLUMNS) - 1)

    def line(cells: Iterable[str], roles: Sequence[str] | None = None) -> str:
        parts = []
        for i, cell in enumerate(cells):
            text = cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            role = roles[i] if roles else ""
            parts.append(style.paint(role, text) if role else text)
        return "  " + "  ".join(parts).rstrip()

    out = [style.paint("bold", line(TABLE_COLUMNS))]
    out.append("  " + style.rule * (sum(widths) + 2 * (len(widths) - 1)))
    for r, row in zip(results, rows, strict=True):
        roles = [""] * len(row)
        for i, o in enumerate(ENDED_OUTCOMES, start=3):
            if r.ended.get(o, 0):
                roles[i] = o
        if r.orphaned:
            roles[len(row) - 3] = sc.Outcome.ORPHANED
        if r.unanswered:
            roles[len(row) - 2] = sc.Outcome.CANCELLED
        roles[-1] = _verdict_role(r.verdict)
        out.append(line(row, roles))
    out.append("  " + style.rule * (sum(widths) + 2 * (len(widths) - 1)))
    out.append(line(totals))
    return "\n".join(out)


def orphan_lines(results: Sequence[Result], style: Style) -> list[str]:
    """One line per orphan: scenario, call id, tool, and where it is stuck."""
    out = []
    for r in results:
        for t in r.tasks:
            if t.orphan is None:
                continue
            frame = t.orphan.stuck_at
            where = f"; stuck at {frame.where()}" if frame else ""
            alive = {True: "still running", False: "ended after its run",
                     None: "outlived its run"}[t.orphan.still_running]
            out.append(f"  {style.paint(sc.Outcome.ORPHANED, 'orphan')} {r.name}: "
                       f"{t.call_id} ({t.tool}, {t.kind}) {alive}{where}")
    return out


def unanswered_lines(results: Sequence[Result], style: Style) -> list[str]:
    """One line per function call left without a response: scenario, call, why."""
    return [f"  {style.paint(sc.Outcome.CANCELLED, 'unanswered')} {r.name}: {u.call_id} "
            f"({u.tool}) has no function response; its task: {u.reason}"
            for r in results for u in r.unanswered]


# --- what the commands print -----------------------------------------------------


def legend(style: Style) -> str:
    """The bars' colours and the still-running tail, under the demo's summary."""
    parts = [style.paint(o, o if o != sc.Outcome.ORPHANED else "ORPHANED")
             for o in (*ENDED_OUTCOMES, sc.Outcome.ORPHANED)]
    return ("  bars: " + "  ".join(parts) + f"   {style.still * 3}{style.arrow} still running "
            "after its run ended")


def progress_line(i: int, n: int, name: str, result: Result, style: Style) -> str:
    """``[ 1/13] seed_bug  2 tasks, 1 orphaned  (0.64 s)``: one scenario done."""
    counter = f"[{i:>{len(str(n))}}/{n}]"
    what = f"{result.started} task{'s' if result.started != 1 else ''}"
    if result.orphaned:
        what += ", " + style.paint(sc.Outcome.ORPHANED, f"{result.orphaned} orphaned")
    if result.unanswered:
        what += ", " + style.paint(sc.Outcome.CANCELLED, f"{len(result.unanswered)} unanswered")
    if result.failure:
        what += ", " + style.paint("failed", "failed: " + result.failure)
    return f"{counter} {name:<22} {what}  ({result.wall_s:.2f} s)"


def demo_scenario(result: Result, style: Style, width: int) -> str:
    """One scenario of ``demo``: its timeline and its unanswered calls."""
    return "\n".join([timeline(result, style, width), *unanswered_lines([result], style)])


def demo_summary(results: Sequence[Result], style: Style, install: Install) -> str:
    """The end of ``demo``: the summary table, the legend and the orphans in a line."""
    out = [style.paint("bold", "Summary") + style.paint("dim", f"  google-adk "
                                                               f"{install.adk_version}"),
           summary_table(results, style), legend(style), ""]
    orphans = sum(r.orphaned for r in results)
    if orphans:
        msg = (f"{orphans} tool task{' outlived its' if orphans == 1 else 's outlived their'}"
               " run")
        adk_leak = any(r.orphaned and r.in_corpus for r in results)
        if adk_leak and not install.adk_issue_7058_fixed:
            msg += (f": google-adk {install.adk_version} has ADK issue 7058, fixed in "
                    f"{install.issue_7058_fixed_in}")
        out.append(style.paint(sc.Outcome.ORPHANED, msg))
    else:
        out.append(style.paint("clean", "no orphaned tool tasks"))
    return "\n".join(out)


def audit_report(results: Sequence[Result], style: Style, install: Install) -> str:
    """``audit`` without ``--json``: the table, each orphan, unanswered call and failure
    in a line, the verdict, and the notes."""
    out = [summary_table(results, style)]
    lines = orphan_lines(results, style) + unanswered_lines(results, style)
    for r in results:
        if r.verdict == "failed":
            why = r.failure or f"{r.unaccounted} task(s) started but never ended"
            lines.append(f"  {style.paint('failed', 'failed')} {r.name}: {why}")
    if lines:
        out += ["", *lines]
    orphans = sum(r.orphaned for r in results)
    n_orph = sum(r.verdict == "orphaned" for r in results)
    adk = f"google-adk {install.adk_version}"
    code = exit_code(results)
    if orphans:
        verdict = style.paint(
            sc.Outcome.ORPHANED,
            f"FAIL: {orphans} orphaned tool task{'s' if orphans != 1 else ''} in {n_orph} of "
            f"{len(results)} scenarios on {adk}")
    elif code:
        verdict = style.paint("failed", f"ERROR: the audit could not complete on {adk}")
    else:
        verdict = style.paint("clean", f"PASS: no orphaned tool tasks in {len(results)} "
                                       f"scenarios on {adk}")
    out += ["", verdict]
    if install.probes_without_source:
        out.append(style.paint(
            "dim", f"note: google-adk is installed without source files; "
                   f"{install.probes_without_source} feature probes answered from the "
                   "release's recorded facts (docs/versions.md)"))
    unanswered = sum(len(r.unanswered) for r in results)
    if unanswered:
        out.append(style.paint(
            "dim", f"note: {unanswered} function call{'s' if unanswered != 1 else ''} left "
                   "without a response (verdict UNANSWERED; the exit code counts orphans "
                   "only)"))
    return "\n".join(out)
