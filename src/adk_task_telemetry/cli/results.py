"""The results model of ``demo`` and ``audit``: what one command's runs came to.

Data only. The harness fills it from the spans and metrics it reads back
(``readback``); three views render it and nothing else: the terminal
(``terminal``), the HTML report (``report_html``) and the ``audit --json`` document
(``audit_json``). A fact that two views show (a verdict, an exit code, the summary's
columns, an orphan's stuck-at frame) is derived here once, so the views cannot
disagree. Public and stable within a minor release: tests build results with it
to render them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import semconv as sc
from ..signals.stacks import Frame, innermost_user_frame

__all__ = [
    "ENDED_OUTCOMES", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_ORPHANED",
    "EXIT_USAGE", "PROG", "TABLE_COLUMNS", "Install", "Orphan", "Result", "Stuck", "Task",
    "Unanswered",
    "UsageError", "exit_code", "overall_verdict",
]

#: Outcomes that end a task inside its run, in the order tables show them.
ENDED_OUTCOMES: tuple[str, ...] = (
    sc.Outcome.OK, sc.Outcome.RECOVERED, sc.Outcome.ERROR, sc.Outcome.CANCELLED)

#: The summary table's columns, in the terminal and in the HTML report alike.
TABLE_COLUMNS: tuple[str, ...] = (
    "scenario", "mode", "started", *ENDED_OUTCOMES, sc.Outcome.ORPHANED, "unanswered",
    "verdict")

#: The command's name, as its messages and the HTML report's command line spell it.
PROG = "adk-task-telemetry"

EXIT_OK = 0
EXIT_ORPHANED = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line we cannot act on: exit code 2."""


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
        """The innermost frame of the application's code in the event's stack."""
        return innermost_user_frame(self.stacktrace)


@dataclass
class Stuck:
    """One ``stuck_task`` event: the task was found running too long, while it ran."""

    report: int
    age_s: float
    state: str
    stacktrace: str

    @property
    def stuck_at(self) -> Frame | None:
        """The innermost frame of the application's code where it waited then."""
        return innermost_user_frame(self.stacktrace)


@dataclass
class Task:
    """One ``tool_task`` span, as the timelines need it."""

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
    stuck: list[Stuck] = field(default_factory=list)

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
    """One scenario run: spans for the timelines, metric totals for the tables.

    ``in_corpus``: whether the scenario is in the ADK audit corpus (an orphan there is
    ADK's leak; outside it, the application's own)."""

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
    in_corpus: bool = True

    @property
    def unaccounted(self) -> int:
        """Tasks counted as started that neither ended nor were orphaned."""
        return self.started - sum(self.ended.values()) - self.orphaned

    @property
    def verdict(self) -> str:
        """``orphaned``, ``failed``, ``unanswered`` or ``clean``, the first that holds."""
        if self.orphaned:
            return "orphaned"
        if self.failure or self.unaccounted:
            return "failed"
        if self.unanswered:
            return "unanswered"
        return "clean"


@dataclass(frozen=True)
class Install:
    """What the results were measured on: the versions (as ``version --json`` shows
    them; ``google-adk`` among them), whether that google-adk has ADK issue 7058, and
    how many feature probes answered from recorded facts (google-adk without source)."""

    versions: Mapping[str, str]
    adk_issue_7058_fixed: bool
    probes_without_source: int = 0
    #: The google-adk release that fixed ADK issue 7058 (``adk_compat.ISSUE_7058_FIXED_IN``).
    issue_7058_fixed_in: str = ""

    @property
    def adk_version(self) -> str:
        return self.versions.get("google-adk", "unknown")


def exit_code(results: Sequence[Result]) -> int:
    """The exit code of ``audit`` for these results: orphans first, then failures."""
    if any(r.orphaned for r in results):
        return EXIT_ORPHANED
    if any(r.verdict == "failed" for r in results):
        return EXIT_FAILED
    return EXIT_OK


def overall_verdict(results: Sequence[Result]) -> str:
    """``clean``, ``orphaned`` or ``failed``: the whole audit in one word."""
    return {EXIT_OK: "clean", EXIT_ORPHANED: "orphaned"}.get(exit_code(results), "failed")
