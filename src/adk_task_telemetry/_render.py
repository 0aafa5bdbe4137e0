"""Terminal drawing for the CLI: timelines and tables, stdlib only.

Kept apart from ``cli.py`` so that what is measured and what is drawn can change
independently. It takes results and returns strings; the one thing it reads besides
its arguments is the terminal's conventions, ``NO_COLOR`` and ``TERM``, in
``colour_wanted`` (listed in the CLI's help, not in configure/variables.py: they
configure no telemetry).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO

from . import semconv as sc
from .stacks import Frame, innermost_user_frame

#: Outcomes that end a task inside its run, in the order tables show them.
ENDED_OUTCOMES: tuple[str, ...] = (
    sc.Outcome.OK, sc.Outcome.RECOVERED, sc.Outcome.ERROR, sc.Outcome.CANCELLED)

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
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if mode == "never":
        return False
    if mode == "always":
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


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


# --- what is drawn -------------------------------------------------------------


@dataclass
class Orphan:
    """The ``orphaned_task`` event of one span, plus whether the task still ran."""

    trigger: str
    age_s: float
    at_ns: int
    stacktrace: str
    still_running: bool | None  # at the end of the scenario; None when unknown

    @property
    def stuck_at(self) -> Frame | None:
        return innermost_user_frame(self.stacktrace)

    @property
    def state(self) -> str:
        """What became of the task after its run, in words (terminal and HTML)."""
        if self.still_running is True:
            return "still running when the scenario ended"
        if self.still_running is False:
            return "ended on its own after its run"
        return "outlived its run"


@dataclass
class Task:
    """One ``tool_task`` span, as the timeline needs it."""

    call_id: str
    tool: str
    kind: str
    outcome: str
    start_ns: int
    end_ns: int
    invocation_id: str = ""
    error_type: str | None = None
    cancel_cause: str | None = None
    orphan: Orphan | None = None

    @property
    def drawn_end_ns(self) -> int:
        """Where the solid bar ends: the task's end, or for an orphan the end of its
        run (creation + ``adk.tool_task.age``). The span itself ends a little later,
        after the plugin captured the orphan's stack."""
        if self.orphan is not None and self.orphan.age_s > 0:
            return min(self.end_ns, self.start_ns + round(self.orphan.age_s * 1e9))
        return self.end_ns


@dataclass
class Unanswered:
    """An ``unanswered_call`` event: a function call left without a response."""

    call_id: str
    tool: str
    reason: str  # what became of its tool task: a cancel cause, error, orphaned, unknown
    invocation_id: str = ""


@dataclass
class Result:
    """One scenario run: spans for the timeline, metric totals for the tables."""

    name: str
    summary: str
    mode: str
    wall_s: float
    tasks: list[Task] = field(default_factory=list)
    started: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    orphaned: int = 0
    orphans_alive: int = 0
    plugin_errors: int = 0
    failure: str | None = None
    unanswered: list[Unanswered] = field(default_factory=list)

    @property
    def unaccounted(self) -> int:
        """Tasks counted as started that neither ended nor were orphaned."""
        return self.started - sum(self.ended.values()) - self.orphaned

    @property
    def verdict(self) -> str:
        if self.orphaned:
            return "orphaned"
        if self.failure or self.unaccounted:
            return "failed"
        if self.unanswered:
            return "unanswered"
        return "clean"


# --- formatting helpers --------------------------------------------------------


def fmt_duration(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _pad(text: str, width: int, visible: int | None = None) -> str:
    n = len(text) if visible is None else visible
    return text + " " * max(0, width - n)


def _clip(text: str, width: int, style: Style) -> str:
    if len(text) <= width:
        return text
    ell = "…" if style.unicode else "~"
    return text[: max(0, width - 1)] + ell


# --- the timeline --------------------------------------------------------------


def _outcome_note(t: Task, style: Style) -> str:
    if t.outcome == sc.Outcome.ORPHANED:
        note = "ORPHANED"
        if t.orphan is not None and t.orphan.still_running:
            note += " still running"
        return note
    if t.outcome == sc.Outcome.ERROR and t.error_type:
        return f"error {t.error_type.rsplit('.', 1)[-1]}"
    if t.outcome == sc.Outcome.RECOVERED and t.error_type:
        return f"recovered {t.error_type.rsplit('.', 1)[-1]}"
    if t.outcome == sc.Outcome.CANCELLED and t.cancel_cause:
        return f"cancelled {style.dot} {t.cancel_cause}"
    return t.outcome


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
    notes = [_outcome_note(t, style) for t in tasks]
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
        if t.orphan is None:
            continue
        o = t.orphan
        mark = style.paint(sc.Outcome.ORPHANED, "! orphan")
        out.append(f"  {mark} {t.tool} {t.call_id} ({t.kind}): {o.state}")
        out.append(f"      its run ended ({o.trigger}) when the task was "
                   f"{fmt_duration(o.age_s)} old")
        frame = o.stuck_at
        if frame is not None:
            out.append(f"      stuck at {frame.where()}")
            if frame.code:
                out.append(f"          {style.paint('dim', frame.code)}")
    return "\n".join(out)


# --- tables --------------------------------------------------------------------

TABLE_COLUMNS: tuple[str, ...] = (
    "scenario", "mode", "started", *ENDED_OUTCOMES, sc.Outcome.ORPHANED, "unanswered",
    "verdict")


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
