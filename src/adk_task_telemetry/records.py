"""What the tracker holds: a record per tool task, one per run, and the public views.

Records are plain data. Only ``tracker.Tracker`` changes them: its transitions
are the one place a record's state moves (see the state diagram there).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    from opentelemetry.trace import Span

    from .metrics import Series

#: A record's states. OPEN: the task runs inside its run. ORPHANED: its run
#: ended while it ran; it is watched until it ends. ENDED: nothing more happens.
OPEN, ORPHANED, ENDED = "open", "orphaned", "ended"


@dataclass(frozen=True)
class OpenTask:
    """A tool task the plugin sees running now."""

    invocation_id: str
    call_id: str
    tool_name: str
    kind: str
    age: float
    orphaned: bool


@dataclass(frozen=True)
class TaskSeen:
    """How one tool task ended, told to observers (``observe.add_observer``) as it
    happens: ``outcome`` is ``orphaned`` for a task still running when its run ended
    (then ``trigger`` and ``stacktrace`` say which end and where it was stuck)."""

    invocation_id: str
    app_name: str
    call_id: str
    tool_name: str
    kind: str
    outcome: str
    cancel_cause: str | None = None
    error_type: str | None = None
    trigger: str | None = None
    stacktrace: str = ""

    @property
    def orphaned(self) -> bool:
        return self.trigger is not None


@dataclass(frozen=True)
class UnansweredCall:
    """A function call of a run that had no function response in the session when
    the run ended. ``reason`` is what became of its tool task: a cancel cause,
    ``error`` or ``orphaned``; ``unknown`` when no task of it ended badly."""

    invocation_id: str
    app_name: str
    call_id: str
    tool_name: str
    reason: str
    trigger: str


@dataclass(frozen=True)
class TrackerState:
    """What the plugin holds right now: the supported test hook.

    ``runs``: runs not yet ended; ``open``: tool tasks open inside them;
    ``orphans``: orphaned tasks still running. All zero when nothing runs.
    """

    runs: int
    open: int
    orphans: int


class TaskRecord:
    """One tool task. ``task`` is the asyncio task whose end is this record's end;
    None when the call runs in its run's own task, so that its callbacks end it.
    ``work``, when set, is a pool thread's call that the record's end waits for too."""

    __slots__ = (
        "call_id", "cancel_cause", "error", "holder", "invocation_id", "key", "kind", "on_done",
        "orphaned_at", "returned", "run", "series", "span", "start", "state", "task",
        "tool_name", "waiting_for_work", "work",
    )

    def __init__(self, run: RunRecord, key: str, call_id: str, tool_name: str, kind: str,
                 span: Span, series: Series, on_done: Callable[[TaskRecord, Any], None],
                 start: float | None = None) -> None:
        self.run = run  # until the record leaves its run (then a detached placeholder)
        self.invocation_id = run.invocation_id
        self.key = key  # in run.tasks: the call id, or call id#n for a duplicate id
        self.call_id = call_id
        self.tool_name = tool_name
        self.kind = kind
        self.span = span
        self.series = series
        self.on_done = on_done
        self.start = time.monotonic() if start is None else start
        self.state = OPEN
        self.task: asyncio.Task[Any] | None = None
        self.error: BaseException | None = None  # what on_tool_error saw
        self.returned = False  # after_tool_callback ran: the call produced a result
        self.cancel_cause: str | None = None  # known before the cancellation lands
        self.orphaned_at = 0.0
        # The call's synchronous callable, running in a pool thread (ADK's tool thread
        # pool): the record ends only once both it and ``task`` are done.
        self.work: Future[Any] | None = None
        # Its task ended while ``work`` still ran (a cancelled event, if any, is on the
        # span already): the record waits for the work.
        self.waiting_for_work = False
        # What the plugin's context variable holds: emptied when the record ends,
        # so a finished asyncio task that ADK keeps around does not keep it.
        self.holder: list[TaskRecord | None] = [self]

    def __call__(self, task: asyncio.Task[Any]) -> None:
        """The done-callback of ``task`` (the record itself: no partial per task)."""
        self.on_done(self, task)


class RunRecord:
    """One invocation. ``driver`` is the task running the run's current step, held
    weakly: a caller's finished task can hold (through its result) the frames that
    keep ADK's invocation context, and so this record, alive."""

    __slots__ = (
        "app_name", "context_ref", "driver_is_run", "driver_ref", "finalizer", "invocation_id",
        "on_driver_done", "sibling_failed", "span", "spawned", "start_ns", "tasks",
        "trace_id", "unhappy", "watched_ref",
    )

    def __init__(self, invocation_id: str, app_name: str) -> None:
        self.invocation_id = invocation_id
        self.app_name = app_name
        self.span: Span | None = None  # ADK's run span, where one is recording
        self.start_ns = time.time_ns()
        self.trace_id = 0  # of the run's spans, once known
        self.driver_ref: weakref.ref[asyncio.Task[Any]] | None = None
        # True when the driver exists only to run this run (ADK's own live task).
        self.driver_is_run = False
        self.tasks: dict[str, TaskRecord] = {}  # the open records: the only list of them
        # The task that carries on_driver_done now (attached only while tasks are open).
        self.watched_ref: weakref.ref[asyncio.Task[Any]] | None = None
        self.on_driver_done: Callable[[asyncio.Task[Any]], None] | None = None
        self.sibling_failed = False
        self.finalizer: weakref.finalize | None = None  # type: ignore[type-arg]
        # Strict mode: tasks a tool body created, with who created them and when.
        self.spawned: list[tuple[asyncio.Task[Any], TaskRecord, int]] = []
        # ADK's invocation context, weakly: its session tells at run end which calls
        # got no response (the call ledger).
        self.context_ref: weakref.ref[Any] | None = None
        # Call id -> how its task ended, for tasks that did not end well only (an
        # unanswered call's reason); None until one does: a clean run allocates nothing.
        self.unhappy: dict[str, str] | None = None

    @property
    def driver(self) -> asyncio.Task[Any] | None:
        return self.driver_ref() if self.driver_ref is not None else None

    def still_running(self) -> bool:
        """Whether the run goes on. ADK's own run task ends with the run; else ADK's
        run span, where one records, ends exactly when the run does; else the task
        last seen reading the run is alive (a caller may hand the generator to a
        task not seen yet: the weakest of the three)."""
        task = self.driver
        if not self.driver_is_run and self.span is not None:
            return getattr(self.span, "end_time", None) is None
        return task is not None and not task.done()
