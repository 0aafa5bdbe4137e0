"""What the tracker holds: a record per tool task, one per run, a tool's metric series,
the tracker's options, and the public views.

Records are data, and import nothing of ours (the signals that read them import them,
never the other way round). Their state moves only in ``tracker.Tracker`` (the state
diagram is there); the reports read them (signals/orphan_report.py,
signals/ledger_report.py), the tracker's helpers keep the fields of their own concern
(run_index.py, run_drivers.py, pool_calls.py, signals/task_spans.py: never ``state``),
and the plugin hands the tracker ADK's objects turned into values (``RunStart``,
``ToolIdentity``). One field is written elsewhere: strict_mode.py's task
factory appends to ``RunRecord.spawned`` (a task created inside a tool task), which
only the tracker takes from. A record's done-callback hands it to ``RecordOwner``,
never further.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Future

    from opentelemetry.context import Context
    from opentelemetry.trace import Span


class RecordOwner(Protocol):
    """What a record's done-callback hands itself to: the tracker implements it. Records
    are data; they know this much of the engine and nothing more."""

    def task_done(self, record: TaskRecord, task: asyncio.Task[Any]) -> None: ...

    def driver_done(self, run: RunRecord, task: asyncio.Task[Any]) -> None: ...


#: A record's states. OPEN: the task runs inside its run. ORPHANED: its run
#: ended while it ran; it is watched until it ends. ENDED: nothing more happens.
OPEN, ORPHANED, ENDED = "open", "orphaned", "ended"


@dataclass(frozen=True)
class Options:
    """What one tracker is asked to do (the plugin's options it acts on)."""

    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000


@dataclass(frozen=True, slots=True)
class ToolIdentity:
    """What a tool task is, fixed when it is created: everything that names it but
    its call id. One per (tool, agent, kind, app), shared by all its tasks."""

    tool_name: str
    tool_type: str
    agent_name: str
    kind: str
    app_name: str


class Series:
    """One (tool, agent, kind, app) attribute set, built once by the metrics
    (``signals.metrics.Metrics.series_for``), and the counts behind ``started`` and
    ``active`` that the tracker changes as tasks enter and leave OPEN. Data the records
    hold (``TaskRecord.series``), so it lives beside them: the metrics read it, the
    records need nothing of the metrics."""

    __slots__ = ("attrs", "by_outcome", "open", "span_attrs", "started")

    def __init__(self, attrs: dict[str, str], span_attrs: dict[str, str],
                 by_outcome: dict[str, dict[str, Any]]) -> None:
        self.attrs = attrs
        self.span_attrs = span_attrs
        self.by_outcome = by_outcome
        self.started = 0
        self.open = 0


class RunStart(NamedTuple):
    """A run as the plugin hands it to ``Tracker.run_started``: ADK's objects already
    turned into values (adk_compat), in one pass. ``owner`` is ADK's invocation
    context, which the tracker only holds weakly (its death ends a run no signal
    ended; the call ledger reads its session through adk_compat); ``span`` the span
    current at the run's start; ``task`` the task running it and ``task_is_run``
    whether ADK made that task for this run alone (it ends with the run)."""

    invocation_id: str
    app_name: str
    conversation_id: str | None
    owner: Any = None
    span: Span | None = None
    task: asyncio.Task[Any] | None = None
    task_is_run: bool = False


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
    the run ended. ``reason`` says why (docs/telemetry.md: what became of its tool
    task, else what ended the run first, else ``unknown``)."""

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

    The SDK span is made when the task's end (or orphan report) is known, with the
    start time and parent context kept here: until then a task costs no span object.
    The record is its task's done-callback (no bound method per task). ``work``,
    when set, is a pool thread's call that the record's end waits for too.
    """

    __slots__ = (
        "call_id", "cancel_cause", "error", "extra", "identity", "key", "orphaned_ns",
        "parent", "returned", "run", "series", "span", "start_ns", "state", "task",
        "waiting_for_work", "work",
    )

    def __init__(self, run: RunRecord, identity: ToolIdentity, series: Series, call_id: str,
                 key: str, parent: Context, start_ns: int) -> None:
        self.run = run
        self.identity = identity
        self.series = series  # the metric attribute set (``_other`` past the cap)
        self.call_id = call_id
        self.key = key  # in run.tasks: the call id, or call id#n for a duplicate id
        self.parent: Context | None = parent  # the OpenTelemetry context it was created in
        self.start_ns = start_ns
        self.state = OPEN
        self.task: asyncio.Task[Any] | None = None
        self.span: Span | None = None  # made early only where something needs it
        self.extra: dict[str, str] | None = None  # opt-in captured arguments/result
        self.error: BaseException | None = None  # what on_tool_error saw
        self.returned = False  # after_tool_callback ran: the call produced a result
        self.cancel_cause: str | None = None  # known before the cancellation lands
        self.orphaned_ns = 0
        # The call's synchronous callable, running in a pool thread (ADK's tool thread
        # pool): the record ends only once both it and ``task`` are done.
        self.work: Future[Any] | None = None
        # Its task ended while ``work`` still ran (a cancelled event, if any, is on the
        # span already): the record waits for the work.
        self.waiting_for_work = False

    def __call__(self, task: asyncio.Task[Any]) -> None:
        self.run.tracker.task_done(self, task)

    @property
    def tool_name(self) -> str:
        return self.identity.tool_name

    @property
    def kind(self) -> str:
        return self.identity.kind


class RunHolder:
    """What the tracker's context variable holds for a run: set in ``before_run``, so
    the run's tool tasks (which copy the context when created) find their run, even
    when two runs share an invocation id. ``run`` is emptied when the run ends, so a
    caller's context that outlives the run keeps nothing; ``parent`` is the holder of
    the run this one started inside (an AgentTool's parent run)."""

    __slots__ = ("parent", "run")

    def __init__(self, run: RunRecord, parent: RunHolder | None) -> None:
        self.run: RunRecord | None = run
        self.parent = parent


#: Runs begun in this process, every tracker's (``runs_begun``).
_runs_begun = 0


def runs_begun() -> int:
    """How many runs began in this process so far: a plugin's close flushes metrics only
    when a run began (ADK records its own metrics inside runs), or ran, since the last."""
    return _runs_begun


class RunRecord:
    """One run (one ``run_async``/``run_live`` call), however ADK names it. ``driver``
    is the task running the run's current step, held weakly: a caller's finished task
    can hold (through its result) the frames that keep ADK's invocation context, and
    so this record, alive. The record is its driver's done-callback."""

    __slots__ = (
        "app_name", "calls", "context_attrs", "conversation_id", "cut_by_caller", "driver_is_run",
        "driver_ref", "holder", "invocation_id", "nested", "older", "owner_ref", "parent_task",
        "quiet", "sibling_failed", "span", "span_end_due", "span_watched", "spawned", "start_ns",
        "end_due_trigger",
        "tasks", "trace_id", "tracker", "unhappy", "watched_ref",
    )

    def __init__(self, tracker: RecordOwner, invocation_id: str, app_name: str,
                 conversation_id: str | None) -> None:
        global _runs_begun
        _runs_begun += 1
        self.tracker = tracker
        self.invocation_id = invocation_id
        self.app_name = app_name
        self.conversation_id = conversation_id
        self.holder: RunHolder | None = None
        self.older: RunRecord | None = None  # an earlier run still going with the same id
        # Where the run's events go: ADK's run span, where one is recording. Where the
        # span current at the run's start is another instrumentation's (OpenInference's
        # proxy), a non-recording stand-in with its context: our events never go on a
        # span of someone else's, our own spans still join the run's trace.
        self.span: Span | None = None
        # The span (recording or not) whose end ends the run (spans.watch_end).
        self.span_watched: Span | None = None
        # The run's end was signalled (its span ended, or after_run) while the task
        # driving it still unwound a cancellation: the run ends when that task is done,
        # or at the bound.
        self.span_end_due: asyncio.TimerHandle | None = None
        # The trigger that deferred end is reported with (run_span_end, or after_run
        # where ADK called it while the caller's cancellation unwound the run).
        self.end_due_trigger = ""
        # Started inside OpenTelemetry's suppress_instrumentation(): no span of ours
        # and no event on any span; metrics, orphans, logs and observers as ever.
        self.quiet = False
        # OpenInference's context attributes (session, user, metadata, tags) set where
        # the run started, copied onto its spans; None when none is.
        self.context_attrs: dict[str, Any] | None = None
        self.start_ns = time.time_ns()
        self.trace_id = 0  # of the run's spans, once known
        self.driver_ref: weakref.ref[asyncio.Task[Any]] | None = None
        # True when the driver exists only to run this run (ADK's own live task).
        self.driver_is_run = False
        self.tasks: dict[str, TaskRecord] = {}  # the open records: the only list of them
        # The task that carries this record as done-callback now (only while tasks
        # are open, or always for ADK's own run task).
        self.watched_ref: weakref.ref[asyncio.Task[Any]] | None = None
        self.sibling_failed = False
        self.cut_by_caller = False  # the caller left before the run finished
        self.nested = False  # started inside a tool task of ours (an AgentTool's run)
        # That tool task's record: orphaned, it takes this run with it (its end).
        self.parent_task: TaskRecord | None = None
        # ADK's invocation context, weakly; its death ends a run no signal ended.
        self.owner_ref: weakref.ref[Any] | None = None
        # The call ledger: function calls this run made (seen in its events) with no
        # response seen yet, call id -> how many; None while there are none.
        self.calls: dict[str, int] | None = None
        # Call id -> how its task ended, for tasks that did not end well only.
        self.unhappy: dict[str, str] | None = None
        # Strict mode: tasks a tool body created, with who created them and when
        # (appended by strict_mode.py's task factory; taken by the tracker at the run's end).
        self.spawned: list[tuple[asyncio.Task[Any], TaskRecord, int]] = []

    def __call__(self, task: asyncio.Task[Any]) -> None:
        self.tracker.driver_done(self, task)

    @property
    def driver(self) -> asyncio.Task[Any] | None:
        return self.driver_ref() if self.driver_ref is not None else None

    @property
    def ended(self) -> bool:
        return self.holder is None

    def still_running(self) -> bool:
        """Whether the run goes on. ADK's own run task ends with the run; else ADK's
        run span, where its end is watched, ends exactly when the run does (and ends
        the run then); else the task last seen reading the run is alive (a caller
        may hand the generator to a task not seen yet: the weakest of the three)."""
        if not self.driver_is_run and self.span_watched is not None:
            return True
        task = self.driver
        return task is not None and not task.done()
