"""TaskTelemetryPlugin: ADK callbacks -> tracker verbs.

Every callback returns None and swallows its own failures: in ADK the first
plugin to return a value short-circuits the rest, and a plugin exception aborts
the user's run. The plugin keeps no task or run state (the tracker owns it): only
whether it hears ADK's process-wide hooks (``_hooked``, off after an uninstrument,
on again at its next run) and a cache of what each tool is (``ToolIdentity``, worked
out once per tool). It turns ADK's objects into the tracker's typed values.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

from google.adk.plugins.base_plugin import BasePlugin
from opentelemetry import metrics, trace
from typing_extensions import override  # ADK's own plugins use it; ADK requires it

from . import adk_compat as compat
from . import debug_endpoint, plugin_order
from . import semconv as sc
from .engine import stuck_sweep as stuck
from .engine import trackers as registry
from .engine.records import (
    OpenTask,
    Options,
    RunStart,
    Series,
    ToolIdentity,
    TrackerState,
    runs_begun,
)
from .engine.tracker import RunUnknown, Tracker
from .lifecycle import close_flush
from .lifecycle import process_exit as _exit
from .plugin_options import PluginOptions, plugin_options
from .signals import pool_metrics
from .signals.capture import Redactor, default_redactor, to_attribute
from .signals.metrics import MAX_SERIES, measured_outside_runs, orphan_points

if TYPE_CHECKING:
    from concurrent.futures import Future

    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext

logger = logging.getLogger(sc.LOGGER_NAME)

#: Tools remembered at most (a model that invents tool names must not grow it).
_TOOLS_CACHED = 4 * MAX_SERIES
_ToolKey = tuple[Any, ...]
_Tool = tuple[ToolIdentity, Series, bool]


class TaskTelemetryPlugin(BasePlugin):
    """A span per ADK tool task, from creation to its end, and orphans at run end.

    Register it first: ``App(plugins=[TaskTelemetryPlugin(), ...])``.

    Args:
      tracer_provider: defaults to the global one (read when a span is made).
      meter_provider: defaults to configure_telemetry()'s own MeterProvider where it
        built one beside an existing provider that could not take its readers, else to
        the global one.
      cancel_orphans: cancel each orphan right after reporting it (its span gets a
        ``cancelled`` event with cause ``orphan_cancelled``).
      track_spawned_tasks: strict mode: also report asyncio tasks that a tool body
        spawned and left running when its run ended, as orphans of its call id.
      capture_arguments: record tool arguments and results (redacted, truncated).
        Off by default: they can hold personal data.
      redact: ``redact(tool_name, value) -> value`` applied before recording.
      max_argument_length: characters kept of a captured argument or result.
      max_open_tasks: records kept at most; further tool tasks are counted in
        ``adk.tool_task.overflow`` and not tracked.
      stuck_after: seconds after which a tool task still running is reported stuck
        (a WARNING log record and a ``stuck_task`` span event with where it waits),
        again at twice, four times ... that age; 0 turns it off (default 120).
      debug_port: the live view's HTTP endpoint (``adk-task-telemetry tasks``): a
        port, ``"0"`` or a range ``"8790-8799"``; None: off (default).
      debug_host: the address it listens on (default ``127.0.0.1``, loopback).

    An option left out (None) is read from its ``ADK_TASK_TELEMETRY_*`` variable
    (docs/configuration.md), so that a zero-code user reaches it too; an argument wins.
    """

    def __init__(
        self,
        name: str = "adk_task_telemetry",
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        cancel_orphans: bool | None = None,
        track_spawned_tasks: bool | None = None,
        capture_arguments: bool | None = None,
        redact: Redactor = default_redactor,
        max_argument_length: int | None = None,
        max_open_tasks: int | None = None,
        stuck_after: float | None = None,
        debug_port: int | str | None = None,
        debug_host: str | None = None,
    ) -> None:
        super().__init__(name=name)
        env = plugin_options()
        cancel_orphans = env.cancel_orphans if cancel_orphans is None else cancel_orphans
        track_spawned_tasks = (env.track_spawned_tasks if track_spawned_tasks is None
                               else track_spawned_tasks)
        capture_arguments = (env.capture_arguments if capture_arguments is None
                             else capture_arguments)
        max_argument_length = (env.max_argument_length if max_argument_length is None
                               else max_argument_length)
        max_open_tasks = env.max_open_tasks if max_open_tasks is None else max_open_tasks
        stuck_after = env.stuck_after if stuck_after is None else float(stuck_after)
        if debug_port is not None:
            debug_endpoint.parse_ports(str(debug_port))  # a bad argument is the caller's error
        elif env.debug_port is not None:
            try:
                debug_endpoint.parse_ports(env.debug_port)
            except ValueError as e:  # a bad variable warns and never stops the agent
                logger.warning("adk_task_telemetry: ADK_TASK_TELEMETRY_DEBUG_PORT: %s; no "
                               "debug endpoint", e)
        debug_port = env.debug_port if debug_port is None else str(debug_port)
        debug_host = env.debug_host if debug_host is None else debug_host
        self._options = PluginOptions(
            capture_arguments=capture_arguments, max_argument_length=max_argument_length,
            cancel_orphans=cancel_orphans, track_spawned_tasks=track_spawned_tasks,
            max_open_tasks=max_open_tasks, stuck_after=stuck_after, debug_port=debug_port,
            debug_host=debug_host)
        if max_open_tasks < 1 or max_argument_length < 0 or not stuck_after >= 0:
            raise ValueError("max_open_tasks must be >= 1, max_argument_length >= 0 and "
                             "stuck_after >= 0")
        # configure_telemetry() beside a MeterProvider it could not add a reader to
        # gives the plugin one of its own (process_exit.py): use it unless told otherwise.
        meter_provider = meter_provider or _exit.plugin_meter_provider()
        pool_metrics.observe(meter_provider)
        self._tracker = Tracker(tracer_provider, meter_provider, Options(
            cancel_orphans=cancel_orphans, track_spawned_tasks=track_spawned_tasks,
            max_open_tasks=max_open_tasks))
        self._capture = capture_arguments
        self._redact = redact
        self._max_arg = max_argument_length
        self._tools: dict[_ToolKey, _Tool] = {}
        #: The last tool seen, with the invocation context (weakly) and agent it was seen in.
        self._last: tuple[Any, weakref.ref[Any], Any, _Tool] | None = None
        # ADK's process-wide hooks (adk_compat) stay while this plugin lives: a
        # Runner's start and close never install or undo them (a Runner per request
        # would pay for both on every run). Undone when the last plugin is collected,
        # or at an explicit uninstrument (``unhook``).
        compat.add_live_teardown_listener(self)
        compat.add_thread_work_listener(self)
        self._hooked = True
        stuck.watch(self._tracker, stuck_after, capture_arguments)
        if debug_port is not None:
            try:
                debug_endpoint.serve(debug_port, debug_host)
            except OSError as e:  # taken: the agent runs on, without the live view
                logger.error("adk_task_telemetry: no debug endpoint: %s", e)
            except ValueError:
                pass  # a bad variable, warned above
        registry.register_shutdown()
        _exit.plugin_built(self)

    # --- public -----------------------------------------------------------------

    @property
    def options(self) -> PluginOptions:
        """The options in force: each argument given, else its variable, else the default."""
        return self._options

    def open_tasks(self) -> list[OpenTask]:
        """Tool tasks running now, orphans included (``orphaned=True``)."""
        return self._tracker.open_tasks()

    def state(self) -> TrackerState:
        """Runs, open tasks and orphans held now (all 0 when idle): for tests and checks."""
        return self._tracker.state()

    @property
    def internal_errors(self) -> int:
        """How many times the plugin failed inside (and swallowed it)."""
        return self._tracker.failures

    # --- run --------------------------------------------------------------------

    @override
    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        try:
            if not self._hooked:  # unhooked (an uninstrument), and used again
                compat.keep_listening(self)
                compat.add_thread_work_listener(self)
                self._hooked = True
            ctx = invocation_context
            task = asyncio.current_task()
            self._tracker.run_started(RunStart(
                str(ctx.invocation_id), _app_name(ctx), compat.session_id_of(ctx), ctx,
                trace.get_current_span(), task, compat.is_adk_task(task)))
            stuck.arm()  # the loop's stuck sweep (once per loop while runs go on)
            plugin_order.take_first_place(self, ctx)
        except Exception:
            self._tracker.failed("before_run_callback")
        return None

    @override
    async def on_event_callback(self, *, invocation_context: InvocationContext,
                                event: Event) -> None:
        try:
            self._tracker.event_seen(invocation_context.invocation_id, asyncio.current_task(),
                                     compat.function_parts(event))
        except Exception:
            self._tracker.failed("on_event_callback")
        return None

    @override
    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        # 2.x calls it for a run whose caller closed the stream too: the caller cut it.
        self._run_ended(invocation_context, sc.EndTrigger.AFTER_RUN, read_close=True)
        return None

    @override
    async def on_run_error_callback(self, *, invocation_context: InvocationContext,
                                    error: Exception) -> None:
        self._run_ended(invocation_context, sc.EndTrigger.RUN_ERROR)
        return None

    @override
    async def close(self) -> None:
        try:
            busy = self._tracker.closed()
            # ADK's server closes its runners before uvicorn dies by SIGTERM: what
            # was recorded goes out now (off the event loop, bounded). Not while
            # other runs go on (a Runner per request): batching does its job there.
            if not busy:
                await close_flush.flush_after_close(_activity())
        except Exception:
            self._tracker.failed("close")

    def unhook(self) -> None:
        """Stops hearing ADK's process-wide hooks (adk_compat) before this plugin is
        collected: the instrumentor's ``uninstrument()`` calls it, so that ADK's
        functions are its own again once no other plugin needs the hooks (the last
        plugin to stop undoes them). Idempotent. A run this plugin serves later hooks
        it again (``before_run_callback``)."""
        self._hooked = False
        compat.remove_live_listener(self)
        compat.remove_thread_work_listener(self)

    def live_run_ended(self, invocation_context: InvocationContext) -> None:
        """A live run ended on an ADK that gives plugins no signal there
        (``compat.LIVE_RUN_END_HOOK``; the releases are ``compat.HOLDS_ON``): adk_compat's
        hook on that release's live path calls this (``compat.LiveRunListener``); not
        for applications to call."""
        self._run_ended(invocation_context, sc.EndTrigger.LIVE_TEARDOWN)

    def thread_work_queued(self, work: Future[Any]) -> None:
        """ADK queued a synchronous callable on its tool thread pool, from the task it
        runs in: a tool call's, whose end now waits for the thread too. adk_compat's hook
        on the pool calls this (``compat.ThreadWorkListener``); not for applications to
        call."""
        try:
            record = self._tracker.current()
            if record is not None:
                self._tracker.bind_thread_work(record, work)
        except Exception:
            self._tracker.failed("thread work")

    def _run_ended(self, invocation_context: InvocationContext, trigger: str, *,
                   read_close: bool = False) -> None:
        """``read_close``: whether the caller closed the run is read from ADK's
        exception in flight (adk_compat.caller_closed_run): only in ``after_run``;
        then also whether that exception is a cancellation unwinding the run's step
        (``compat.cancellation_unwinds_step``), read here before any await."""
        try:
            run = self._tracker.run_of(str(invocation_context.invocation_id))
            if run is not None:
                cut = read_close and compat.caller_closed_run()
                self._tracker.run_ended(
                    run, trigger, cut,
                    unwinding=cut and compat.cancellation_unwinds_step(sys.exc_info()[1]))
        except Exception:
            self._tracker.failed(trigger)

    # --- tools ------------------------------------------------------------------

    @override
    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> None:
        # ADK's objects turned into the tracker's values in one pass (adk_compat reads
        # them), then one verb: the tracker never goes back to them.
        tracker = self._tracker
        try:
            ctx = compat.invocation_context_of(tool_context)
            identity, series, stops = self._tool(tool, ctx)
            # whole (a join key to the session's call and its response, however long), "" for none
            call_id = tool_context.function_call_id or ""
            task = asyncio.current_task()
            extra = (self._captured(sc.GEN_AI_TOOL_CALL_ARGUMENTS, identity.tool_name,
                                    tool_args) if self._capture else None)
            target = compat.stop_streaming_target(tool_args) if stops else None
            try:
                tracker.tool_started(ctx.invocation_id, call_id, identity, series, task,
                                     extra, target)
            except RunUnknown:  # a tool task seen without its before_run (added mid-run)
                tracker.run_started(RunStart(str(ctx.invocation_id), identity.app_name,
                                             compat.session_id_of(ctx), ctx))
                tracker.tool_started(ctx.invocation_id, call_id, identity, series, task,
                                     extra, target)
        except Exception:
            tracker.failed("before_tool_callback")
        return None

    @override
    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext, result: dict[str, Any]) -> None:
        # As before_tool: ADK's objects turned into values here, then one tracker verb.
        tracker = self._tracker
        try:
            call_id = tool_context.function_call_id or ""  # whole, as at the tool's start
            record = tracker.current()  # the common case: the call's own task holds it
            if (record is not None and record.call_id == call_id and record.error is None
                    and record.task is not None and not self._capture
                    and not compat.works_in_background(record.kind)):
                return None  # its task's end says all: nothing to note here
            ctx = compat.invocation_context_of(tool_context)
            identity = self._tool(tool, ctx)[0]
            captured = (self._captured(sc.GEN_AI_TOOL_CALL_RESULT, identity.tool_name, result)
                        if self._capture else None)
            moves = compat.works_in_background(identity.kind)
            tracker.returned_here(
                ctx.invocation_id, call_id, captured, moves,
                compat.streaming_task_for(ctx, identity.tool_name, call_id) if moves else None)
        except Exception:
            tracker.failed("after_tool_callback")
        return None

    @override
    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                     tool_context: ToolContext, error: Exception) -> None:
        try:
            if compat.is_tool_error(error):
                self._tracker.raised_here(compat.invocation_context_of(tool_context).invocation_id,
                                          tool_context.function_call_id or "", error)
        except Exception:
            self._tracker.failed("on_tool_error_callback")
        return None

    # --- internals --------------------------------------------------------------

    def _tool(self, tool: BaseTool, ctx: Any) -> _Tool:
        """What a call to ``tool`` in ``ctx`` is (its identity, with the app's name,
        series, and whether it stops a streaming tool), worked out once per tool: the
        last one is kept at hand (a run's calls mostly go to one tool), the rest by
        their key."""
        last = self._last
        agent = getattr(ctx, "agent", None)
        if last is not None and last[0] is tool and last[2] is agent and last[1]() is ctx:
            return last[3]  # the same invocation context: its app and live-ness too
        app_name = str(getattr(ctx, "app_name", None) or "")
        key = (*compat.tool_key(tool, ctx), app_name)
        found = self._tools.get(key)
        if found is None:
            identity = ToolIdentity(str(tool.name or "") or type(tool).__name__,
                                    type(tool).__name__, compat.agent_name_of(ctx),
                                    compat.task_kind(tool, ctx), app_name)
            found = (identity, self._tracker.metrics.series_for(identity),
                     identity.kind == sc.Kind.CALL and compat.is_stop_streaming(tool))
            if len(self._tools) < _TOOLS_CACHED:
                self._tools[key] = found
        try:  # weakly: the context's death ends a run no signal ended (the tracker's)
            self._last = (tool, weakref.ref(ctx), agent, found)
        except TypeError:
            self._last = None
        return found

    def _captured(self, key: str, tool_name: str, value: Any) -> dict[str, str] | None:
        try:
            redacted = self._redact(tool_name, value)
        except Exception:
            logger.warning("adk_task_telemetry: redact hook failed; nothing recorded")
            return None
        if redacted is None:
            return None
        return {key: to_attribute(redacted, self._max_arg)}


def _activity() -> close_flush.Activity:
    """What may have recorded metrics since the last close (close_flush.Activity): every
    plugin's runs (begun, and alive now) and its measurements outside runs; its
    orphan measurements, which a close does not leave to a deferred collection."""
    return close_flush.Activity((runs_begun(), measured_outside_runs()),
                                registry.any_run_alive(), orphan_points())


def _app_name(ctx: Any) -> str:
    return str(getattr(ctx, "app_name", "") or "")
