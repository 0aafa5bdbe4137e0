"""Beside OpenInference's google-adk instrumentor, as its users run the plugin.

With ``GoogleADKInstrumentor`` on google-adk 2.13, ADK's own run span is gone: the span
current when a run starts is OpenInference's (``invoke_workflow``, inside its
``invocation``), a wrapt proxy of an SDK span; on 2.12 ADK's own ``invocation`` stays.
The plugin must leave that object exactly as it was (no patched ``end``, no events of
ours on it), still learn when the run ended (from the end of that span, through
``OpenSpanProcessor``, or from its other signals), and still report the orphan. Inside
OpenTelemetry's ``suppress_instrumentation()`` (which OpenInference honours) the plugin
makes no span, while its metrics and orphan report go on. OpenInference's context
attributes (``using_attributes``) are copied onto the ``tool_task`` spans.

Real parts only: ADK's Runner with a scripted model, a synchronous tool on ADK's tool
thread pool (a thread cannot be cancelled: cut by its caller, the call is a real
orphan), the OTel SDK with in-memory exporters, and OpenInference's own instrumentor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_task_telemetry import TaskTelemetryPlugin, TrackerState
from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry import semconv as sc
from adk_task_telemetry.scenarios import ScriptedLlm, call
from adk_task_telemetry.signals.span_processors import OpenSpanProcessor

from .conftest import Telemetry

try:
    from openinference.instrumentation import google_adk as oi_adk
    from openinference.instrumentation import using_attributes
except ImportError:  # not installed (the dev extra has it)
    oi_adk = None

# OpenInference's instrumentor 1.x supports google-adk 2.10 and later; the tool thread
# pool that makes the orphan here runs run_async calls from 2.11 on.
_WHY_NOT = (
    f"OpenInference's google-adk instrumentor supports google-adk 2.10 and later, and these "
    f"runs need ADK's tool thread pool in run_async (2.11 on): this is {compat.ADK_VERSION}"
    if not compat.RUN_ASYNC_USES_TOOL_THREAD_POOL or compat.ADK_VERSION < (2, 10, 0)
    else "openinference-instrumentation-google-adk is not installed (the dev extra has it)"
    if oi_adk is None else "")
beside_openinference = pytest.mark.skipif(bool(_WHY_NOT), reason=_WHY_NOT)

#: The newest google-adk that OpenInference's instrumentor (1.0.5) supports and this suite
#: runs: there the span current at a run's start is OpenInference's proxy.
NEWEST_OI_ADK = (2, 13, 0)
APP = "oi_app"
USER = "oi-user"
CALL = "call-crunch"
#: Names of ours that must never appear on another instrumentation's span.
OUR_EVENTS = {sc.EVENT_ORPHANED_TASK, sc.EVENT_OPEN_SPAN, sc.EVENT_UNANSWERED_CALL}


@dataclass
class Stack:
    """OpenInference's instrumentor and the plugin on one SDK TracerProvider that has
    ``OpenSpanProcessor`` (as ``configure_telemetry()`` installs it). ADK's own spans,
    where OpenInference leaves any, go to the process's global provider (``adk``)."""

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    adk: Telemetry

    def plugin(self) -> TaskTelemetryPlugin:
        return TaskTelemetryPlugin(tracer_provider=self.tracer_provider,
                                   meter_provider=self.meter_provider)

    def finished(self) -> list[ReadableSpan]:
        return [*self.spans.get_finished_spans(), *self.adk.spans.get_finished_spans()]

    def ours(self) -> list[ReadableSpan]:
        return [s for s in self.finished()
                if s.instrumentation_scope is not None
                and s.instrumentation_scope.name == sc.SCOPE_NAME]

    def theirs(self) -> list[ReadableSpan]:
        """OpenInference's spans."""
        return [s for s in self.finished() if s.instrumentation_scope is not None
                and s.instrumentation_scope.name.startswith("openinference.")]

    def same(self, span: Any) -> ReadableSpan:
        """The exported span of ``span`` (a live span object, or a proxy of one)."""
        span_id = span.get_span_context().span_id
        (found,) = [s for s in self.finished()
                    if s.context is not None and s.context.span_id == span_id]
        return found

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if sm.scope.name == sc.SCOPE_NAME and m.name == name:
                        out.extend(m.data.data_points)
        return out

    def total(self, name: str) -> float:
        return float(sum(p.value for p in self.points(name)))


@pytest.fixture
def stack(telemetry: Telemetry) -> Iterator[Stack]:
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    tp.add_span_processor(OpenSpanProcessor())
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    assert oi_adk is not None
    instrumentor = oi_adk.GoogleADKInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        yield Stack(spans, reader, tp, mp, telemetry)
    finally:
        instrumentor.uninstrument()
        mp.shutdown()
        tp.shutdown()


@dataclass
class Snapshot:
    """What an object looks like from outside: its type, its instance attributes'
    names, which of them are callables, and the function behind each method."""

    type: type
    keys: frozenset[str]
    callables: frozenset[str]
    methods: dict[str, Any]

    @classmethod
    def of(cls, obj: Any) -> Snapshot:
        attrs = dict(vars(obj))
        names = ("end", "add_event", "set_attribute", "set_attributes", "set_status",
                 "record_exception", "is_recording", "get_span_context", "update_name")
        return cls(type(obj), frozenset(attrs), frozenset(k for k, v in attrs.items()
                                                          if callable(v)),
                   {n: getattr(getattr(obj, n), "__func__", None) for n in names})


class SpanAtRunStart(BasePlugin):
    """Registered ahead of the plugin: keeps the span current at ``before_run`` (the
    object the plugin is handed) and how it and the span it wraps looked then."""

    def __init__(self) -> None:
        super().__init__(name="span_at_run_start")
        self.span: Any = None
        self.before: tuple[Snapshot, Snapshot] | None = None

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        self.span = trace.get_current_span()
        self.before = self.after()
        return None

    @property
    def inner(self) -> Any:
        """The SDK span itself (behind OpenInference's proxy, where it is one)."""
        return getattr(self.span, "__wrapped__", self.span)

    @property
    def foreign(self) -> bool:
        """Another instrumentation's span: not ADK's own span object."""
        scope = self.inner.instrumentation_scope.name
        return self.span is not self.inner or scope != "gcp.vertex.agent"

    def after(self) -> tuple[Snapshot, Snapshot]:
        return Snapshot.of(self.span), Snapshot.of(self.inner)


class Crunch:
    """A synchronous tool that ADK runs on its tool thread pool: it blocks until
    released. ``entered`` is set (on the loop) once its thread runs it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = asyncio.Event()
        self.returned = threading.Event()
        self.loop = asyncio.get_running_loop()
        self.on_enter: Callable[[], None] | None = None

    def tool(self) -> Callable[..., dict[str, str]]:
        def crunch_numbers(tool_context: ToolContext) -> dict[str, str]:
            """Crunches numbers (blocks its thread)."""
            self.loop.call_soon_threadsafe(self._entered)
            self.release.wait(30)
            self.returned.set()
            return {"status": "crunched"}
        return crunch_numbers

    def _entered(self) -> None:
        self.entered.set()
        if self.on_enter is not None:
            self.on_enter()


def _runner(crunch: Crunch, plugins: list[BasePlugin]) -> Runner:
    agent = LlmAgent(name="analyst", model=ScriptedLlm(turns=[[call("crunch_numbers", CALL)]]),
                     instruction="scripted", tools=[crunch.tool()])
    return Runner(app=App(name=APP, root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService())


def _run(runner: Runner, sid: str, *, pool: bool = True) -> AsyncIterator[Any]:
    """The run, its synchronous tool on ADK's tool thread pool where ``pool``."""
    config = RunConfig()
    if pool:
        from google.adk.agents.run_config import ToolThreadPoolConfig  # type: ignore[attr-defined]

        config = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig())
    return runner.run_async(  # type: ignore[no-any-return]
        user_id=USER, session_id=sid,
        new_message=types.Content(role="user", parts=[types.Part(text="go")]),
        run_config=config)


async def _session(runner: Runner) -> str:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return str(session.id)


async def _until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Until ``check()`` holds (a positive signal), failing with ``what`` after ``timeout``."""
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.002)
    try:
        await asyncio.wait_for(poll(), timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"never happened: {what}")


async def _cut_by_caller(runner: Runner, crunch: Crunch) -> None:
    """The caller's task reads the run, and is cancelled while the tool's thread
    works: the call is orphaned (ADK cannot stop a thread)."""
    sid = await _session(runner)

    async def consume() -> None:
        async with contextlib.aclosing(_run(runner, sid)) as agen:  # type: ignore[type-var]
            async for _ in agen:
                pass

    reader = asyncio.ensure_future(consume())
    await asyncio.wait_for(crunch.entered.wait(), 15)
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader


async def _finish(plugin: TaskTelemetryPlugin, crunch: Crunch, runner: Runner) -> None:
    crunch.release.set()
    await _until(lambda: plugin.state().orphans == 0, "the orphan's thread returned")
    await runner.close()


@beside_openinference
async def test_foreign_run_span_is_left_as_it_was(stack: Stack,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The span current at the run's start is OpenInference's (on 2.13 its
    ``invoke_workflow`` span, a proxy; on 2.12 OpenInference leaves ADK's own
    ``invocation`` current): after a run with an orphan it has the same type, instance
    attributes and methods as before (the proxy and the span behind it), no event of
    ours is on any span of OpenInference's, and the orphan is reported all the same, in
    the run's trace."""
    caplog.set_level(logging.WARNING, logger=sc.LOGGER_NAME)
    crunch = Crunch()
    seen = SpanAtRunStart()
    plugin = stack.plugin()
    runner = _runner(crunch, [seen, plugin])
    await _cut_by_caller(runner, crunch)
    await _until(lambda: plugin.state().orphans == 1, "the call reported orphaned")
    assert not crunch.returned.is_set()  # it really is still running

    assert seen.before is not None
    if compat.ADK_VERSION >= NEWEST_OI_ADK:
        # On the newest ADK OpenInference supports, its proxy is what the plugin is handed.
        assert seen.foreign and seen.span is not seen.inner
    assert seen.after() == seen.before
    assert "end" not in vars(seen.inner)

    # No event or attribute of ours on any span of OpenInference's.
    theirs = stack.theirs()
    assert theirs
    assert not OUR_EVENTS & {e.name for s in theirs for e in s.events}
    assert not [k for s in theirs for k in (s.attributes or {}) if k.startswith("adk.")]

    run_span = stack.same(seen.span)
    (orphan,) = [s for s in stack.ours() if s.name.startswith(sc.SPAN_NAME_PREFIX)]
    assert orphan.attributes is not None
    assert orphan.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.ORPHANED
    assert orphan.attributes[sc.GEN_AI_TOOL_CALL_ID] == CALL
    assert orphan.context is not None and run_span.context is not None
    assert orphan.context.trace_id == run_span.context.trace_id
    assert sc.EVENT_ORPHANED_TASK in [e.name for e in orphan.events]
    # The call ledger's event: on a span of ours in the run's trace, under the run's span
    # (which had ended when the run's end was known).
    (unanswered,) = [s for s in stack.ours() if s.name == sc.SPAN_UNANSWERED_CALL]
    assert unanswered.parent is not None
    assert unanswered.parent.span_id == run_span.context.span_id
    assert [e.name for e in unanswered.events] == [sc.EVENT_UNANSWERED_CALL]
    assert stack.total("adk.tool_task.orphaned") == 1
    assert [r for r in caplog.records if r.getMessage().startswith("orphaned tool task:")]
    await _finish(plugin, crunch, runner)
    assert seen.after() == seen.before


@beside_openinference
async def test_run_end_taken_from_the_run_span(stack: Stack) -> None:
    """The caller's own task cuts the run (a timeout around its loop) and goes on: no
    task ends and ADK calls no ``after_run``; the end of the span current at the run's
    start (OpenInference's on 2.13: seen by ``OpenSpanProcessor``, never patched) ends
    the run there and then."""
    crunch = Crunch()
    seen = SpanAtRunStart()
    plugin = stack.plugin()
    runner = _runner(crunch, [seen, plugin])
    sid = await _session(runner)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as cut:
            loop = asyncio.get_running_loop()
            crunch.on_enter = lambda: cut.reschedule(loop.time())
            async with contextlib.aclosing(_run(runner, sid)) as agen:  # type: ignore[type-var]
                async for _ in agen:
                    pass
    # This task, which read the run, is still running: only the run span's end tells.
    await _until(lambda: plugin.state().runs == 0, "the run ended")
    assert plugin.state().orphans == 1
    assert not crunch.returned.is_set()
    points = stack.points("adk.tool_task.orphaned")
    assert [p.attributes[sc.ADK_RUN_END_TRIGGER] for p in points] == [sc.EndTrigger.RUN_SPAN_END]
    if compat.ADK_VERSION >= NEWEST_OI_ADK:
        assert seen.foreign
    assert seen.before is not None and seen.after() == seen.before
    await _finish(plugin, crunch, runner)


@beside_openinference
async def test_suppressed_instrumentation_makes_no_span(stack: Stack,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """Inside ``suppress_instrumentation()`` OpenInference makes no span, and neither does
    the plugin; its metrics, orphan report and log record are what they would be."""
    caplog.set_level(logging.WARNING, logger=sc.LOGGER_NAME)
    crunch = Crunch()
    plugin = stack.plugin()
    runner = _runner(crunch, [plugin])
    with suppress_instrumentation():
        await _cut_by_caller(runner, crunch)
        await _until(lambda: plugin.state().orphans == 1, "the call reported orphaned")
    assert stack.theirs() == []  # OpenInference honours it (ADK itself does not)
    assert stack.ours() == []
    assert stack.total("adk.tool_task.started") == 1
    assert stack.total("adk.tool_task.orphaned") == 1
    (log,) = [r for r in caplog.records if r.getMessage().startswith("orphaned tool task:")]
    assert CALL in log.getMessage()
    await _finish(plugin, crunch, runner)
    assert stack.ours() == []
    (lifetime,) = stack.points("adk.tool_task.orphan_lifetime")
    assert lifetime.count == 1


@beside_openinference
async def test_openinference_context_attributes_on_tool_task_spans(stack: Stack) -> None:
    """``using_attributes`` (session, user, metadata, tags) reaches our spans too, so a
    view filtered by them in Phoenix or Langfuse keeps the tool tasks."""
    crunch = Crunch()
    crunch.release.set()  # an ordinary call: it returns at once
    plugin = stack.plugin()
    runner = _runner(crunch, [plugin])
    sid = await _session(runner)
    with using_attributes(session_id="oi-session", user_id="oi-person",
                          metadata={"tenant": "t1"}, tags=["beta", "eu"]):
        async with contextlib.aclosing(_run(runner, sid)) as agen:  # type: ignore[type-var]
            async for _ in agen:
                pass
    (span,) = stack.ours()
    attrs = dict(span.attributes or {})
    # What OpenInference's own span of the call (our parent) carries: inside the run its
    # wrapper sets the run's user itself.
    assert span.parent is not None
    (parent,) = [s for s in stack.finished() if s.context is not None
                 and s.context.span_id == span.parent.span_id]
    assert parent.name == "execute_tool crunch_numbers"
    theirs = dict(parent.attributes or {})
    for key in ("session.id", "user.id", "metadata", "tag.tags"):
        assert attrs[key] == theirs[key], key
    assert attrs["session.id"] == "oi-session"
    assert attrs["metadata"] == '{"tenant": "t1"}'
    assert tuple(attrs["tag.tags"]) == ("beta", "eu")  # type: ignore[arg-type]
    assert attrs[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
    await runner.close()


@beside_openinference
def test_context_keys_are_openinference_s() -> None:
    """The OTel context keys the plugin reads are OpenInference's own names."""
    from openinference.instrumentation.context_attributes import CONTEXT_ATTRIBUTES

    from adk_task_telemetry.signals.span_processors import OPENINFERENCE_CONTEXT_KEYS

    assert set(OPENINFERENCE_CONTEXT_KEYS) <= set(CONTEXT_ATTRIBUTES)


async def test_suppressed_run_adds_nothing_to_adk_spans(telemetry: Telemetry) -> None:
    """Without OpenInference, ADK traces a run inside ``suppress_instrumentation()``
    all the same (it does not honour the key); the plugin makes no span of its own and
    adds nothing to ADK's, and counts the task as for any run. Every ADK version."""
    crunch = Crunch()
    crunch.release.set()
    plugin = telemetry.plugin()
    runner = _runner(crunch, [plugin])
    sid = await _session(runner)
    with suppress_instrumentation():
        async with contextlib.aclosing(_run(runner, sid, pool=False)) as agen:  # type: ignore[type-var]
            async for _ in agen:
                pass
    assert crunch.returned.is_set()
    spans = telemetry.spans.get_finished_spans()
    assert [s for s in spans if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == "gcp.vertex.agent"]
    assert telemetry.tool_spans() == []
    assert not [s for s in spans if s.instrumentation_scope is not None
                and s.instrumentation_scope.name == sc.SCOPE_NAME]
    assert not [k for s in spans for k in (s.attributes or {}) if k.startswith("adk.tool_")]
    assert not OUR_EVENTS & {e.name for s in spans for e in s.events}
    metrics = telemetry.metrics()
    assert sum(p.value for p in metrics["adk.tool_task.started"]) == 1
    (duration,) = metrics["adk.tool_task.duration"]
    assert duration.count == 1
    assert duration.attributes[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
    assert plugin.state() == TrackerState(0, 0, 0)
    await runner.close()


async def test_context_attributes_read_by_name(telemetry: Telemetry) -> None:
    """The four context values OpenInference's ``using_attributes`` sets, set here by
    hand (OpenInference need not be installed), reach the ``tool_task`` span; a value
    that is no span attribute value (a dict) is left out."""
    crunch = Crunch()
    crunch.release.set()
    runner = _runner(crunch, [telemetry.plugin()])
    sid = await _session(runner)
    ctx = otel_context.get_current()
    for key, value in (("session.id", "s-1"), ("user.id", "u-1"), ("metadata", {"no": 1}),
                       ("tag.tags", ["a", "b"])):
        ctx = otel_context.set_value(key, value, ctx)
    token = otel_context.attach(ctx)
    try:
        async with contextlib.aclosing(_run(runner, sid, pool=False)) as agen:  # type: ignore[type-var]
            async for _ in agen:
                pass
    finally:
        otel_context.detach(token)
    (span,) = telemetry.tool_spans()
    attrs = dict(span.attributes or {})
    assert (attrs["session.id"], attrs["user.id"]) == ("s-1", "u-1")
    assert tuple(attrs["tag.tags"]) == ("a", "b")  # type: ignore[arg-type]
    assert "metadata" not in attrs
    await runner.close()
