"""TaskTelemetryPlugin: ADK callbacks -> ledger.

Every callback returns None and swallows its own failures: in ADK the first
plugin to return a value short-circuits the rest, and a plugin exception aborts
the user's run.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from opentelemetry import metrics, trace

from . import adk_compat as compat
from . import exit as _exit
from . import semconv as sc
from .ledger import (
    Ledger,
    LedgerOptions,
    OpenTask,
    TaskRecord,
    TrackerState,
    note_spawned,
    register_shutdown,
)
from .privacy import Redactor, default_redactor, to_attribute

logger = logging.getLogger(sc.LOGGER_NAME)


class TaskTelemetryPlugin(BasePlugin):
    """A span per ADK tool task, from creation to its end, and orphans at run end.

    Register it first: ``App(plugins=[TaskTelemetryPlugin(), ...])``.

    Args:
      tracer_provider, meter_provider: default to the global providers.
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
    """

    def __init__(
        self,
        name: str = "adk_task_telemetry",
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        cancel_orphans: bool = False,
        track_spawned_tasks: bool = False,
        capture_arguments: bool = False,
        redact: Redactor = default_redactor,
        max_argument_length: int = 1024,
        max_open_tasks: int = 10_000,
    ) -> None:
        super().__init__(name=name)
        if max_open_tasks < 1 or max_argument_length < 0:
            raise ValueError("max_open_tasks must be >= 1 and max_argument_length >= 0")
        self._ledger = Ledger(
            tracer_provider, meter_provider or _exit.plugin_meter_provider(), LedgerOptions(
            cancel_orphans=cancel_orphans, track_spawned_tasks=track_spawned_tasks,
            max_open_tasks=max_open_tasks))
        self._capture = capture_arguments
        self._redact = redact
        self._max_arg = max_argument_length
        self._failures = 0
        # The record of the tool call whose task is running, per plugin instance.
        # before/after/error callbacks of one call run in that call's task, so they
        # all see the same value; tasks a tool body creates inherit it (strict
        # mode); and it tells close() when a nested AgentTool runner closes from
        # inside a tool task.
        self._current: contextvars.ContextVar[list[TaskRecord | None] | None] = (
            contextvars.ContextVar(f"adk_task_telemetry_{id(self):x}", default=None))
        if track_spawned_tasks:
            _strict_plugins.add(self)
        compat.add_live_teardown_listener(self)
        register_shutdown()

    # --- public -----------------------------------------------------------------

    def open_tasks(self) -> list[OpenTask]:
        """Tool tasks running now, orphans included (``orphaned=True``)."""
        return self._ledger.open_tasks()

    def state(self) -> TrackerState:
        """Runs, open tasks and orphans held now (all 0 when idle): for tests and checks."""
        return self._ledger.state()

    def _current_record(self) -> TaskRecord | None:
        holder = self._current.get()
        return holder[0] if holder else None

    @property
    def internal_errors(self) -> int:
        """How many callbacks failed inside the plugin (and were swallowed)."""
        return self._failures + self._ledger.failures

    # --- run --------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        try:
            ctx = invocation_context
            task = _current_task()
            self._ledger.begin_run(
                str(ctx.invocation_id), getattr(ctx, "app_name", "") or "",
                trace.get_current_span(), task, compat.is_adk_task(task), ctx)
            if self._ledger.options.track_spawned_tasks:
                _install_spawn_tracking()
        except Exception:
            self._failed("before_run_callback")
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        self._sweep(invocation_context, sc.EndTrigger.AFTER_RUN)
        return None

    async def on_run_error_callback(self, *, invocation_context: Any, error: Exception) -> None:
        self._sweep(invocation_context, sc.EndTrigger.RUN_ERROR)
        return None

    async def close(self) -> None:
        try:
            if self._current_record() is not None:
                # A nested AgentTool runner closing inside a tool task (ADK 1.x):
                # the runs of this plugin are still in progress.
                return
            self._ledger.sweep_all(sc.EndTrigger.PLUGIN_CLOSE)
            await _exit.flush_after_close()
        except Exception:
            self._failed("close")

    def _on_live_teardown(self, invocation_context: Any) -> None:
        """ADK 1.x only (see adk_compat): a live run stopped its background tools."""
        self._sweep(invocation_context, sc.EndTrigger.LIVE_TEARDOWN)

    def _sweep(self, invocation_context: Any, trigger: str) -> None:
        try:
            self._ledger.sweep(str(invocation_context.invocation_id), trigger)
        except Exception:
            self._failed(trigger)

    # --- tools ------------------------------------------------------------------

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> None:
        try:
            ctx = compat.invocation_context_of(tool_context)
            kind = _kind(tool, ctx)
            run = self._ledger.run_for(str(ctx.invocation_id), getattr(ctx, "app_name", "") or "",
                                       ctx)
            stop = compat.is_stop_streaming_call(tool, tool_args) if kind == sc.Kind.CALL else None
            if stop is not None:
                self._ledger.mark_stop_requested(run.invocation_id, stop)
            tool_name = str(getattr(tool, "name", "") or type(tool).__name__)
            extra = None
            if self._capture:
                extra = self._captured(sc.GEN_AI_TOOL_CALL_ARGUMENTS, tool_name, tool_args)
            record = self._ledger.open_task(
                run, str(tool_context.function_call_id or ""), tool_name, type(tool).__name__,
                compat.agent_name_of(ctx), compat.session_id_of(ctx), kind, extra)
            if record is None:  # max_open_tasks reached
                return None
            self._current.set(record.holder)
            task = _current_task()
            # A call that runs in the run's own task has no task of its own: its
            # callbacks mark its end.
            self._ledger.bind(record, None if task is run.task else task)
        except Exception:
            self._failed("before_tool_callback")
        return None

    async def after_tool_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, result: Any
    ) -> None:
        try:
            record = self._current_record()
            if record is not None and record.call_id == str(tool_context.function_call_id or ""):
                record.after_seen = True
                if self._capture:
                    attrs = self._captured(sc.GEN_AI_TOOL_CALL_RESULT, record.tool_name, result)
                    if attrs:
                        record.span.set_attributes(attrs)
                if record.kind == sc.Kind.STREAMING:
                    # The dispatch only returned "pending": the work runs in the
                    # background task ADK registered a moment ago.
                    ctx = compat.invocation_context_of(tool_context)
                    task = compat.streaming_task_for(ctx, record.tool_name, record.call_id)
                    if task is not None:
                        self._ledger.bind(record, task)
                elif record.bound_to_callbacks:
                    self._ledger.finish_returned(record)
        except Exception:
            self._failed("after_tool_callback")
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: Any, tool_context: Any, error: Exception
    ) -> None:
        try:
            record = self._current_record()
            # From 2.13 on ADK also reports a cancellation here: the task's own end
            # says that better, so only real errors are kept.
            if (record is not None and isinstance(error, Exception)
                    and record.call_id == str(tool_context.function_call_id or "")):
                record.error = error
                if record.bound_to_callbacks:
                    self._ledger.finish(record, sc.Outcome.ERROR, error)
        except Exception:
            self._failed("on_tool_error_callback")
        return None

    # --- internals --------------------------------------------------------------

    def _captured(self, key: str, tool_name: str, value: Any) -> dict[str, str] | None:
        try:
            redacted = self._redact(tool_name, value)
        except Exception:
            logger.warning("adk_task_telemetry: redact hook failed; nothing recorded")
            return None
        if redacted is None:
            return None
        return {key: to_attribute(redacted, self._max_arg)}

    def _failed(self, where: str) -> None:
        self._failures += 1
        if self._failures <= 10:
            logger.exception("adk_task_telemetry: internal error in %s (ignored)", where)


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _kind(tool: Any, ctx: Any) -> str:
    if compat.is_long_running_tool(tool):
        return sc.Kind.LONG_RUNNING
    if compat.is_live(ctx):
        if compat.is_streaming_tool(tool):
            return sc.Kind.STREAMING
        if compat.is_non_blocking_tool(tool):
            return sc.Kind.NON_BLOCKING
    return sc.Kind.CALL


# --- strict mode: tasks a tool body spawns ---------------------------------------

_strict_plugins: weakref.WeakSet[TaskTelemetryPlugin] = weakref.WeakSet()
_spawn_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def _install_spawn_tracking() -> None:
    """Chains a task factory onto the running loop (once per loop; uvloop too)."""
    loop = asyncio.get_running_loop()
    if loop in _spawn_loops:
        return
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        if previous is not None:
            task = previous(loop, coro, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        try:
            if isinstance(task, asyncio.Task):
                for plugin in _strict_plugins:
                    record = plugin._current_record()
                    if record is not None and record.run.track_spawned:
                        note_spawned(record, task)
        except Exception:
            logger.debug("spawned-task tracking failed", exc_info=True)
        return task

    loop.set_task_factory(factory)
    _spawn_loops.add(loop)
