"""A tool task's SDK span, and what a run's start tells about the spans of the run.

The span of a task is made when its end (or orphan report) is known, from the start
time and parent context kept in its record: span processors see its ``on_start``
then, not at the task's creation. A stuck task is visible from the moment it is
reported orphaned (its run's end), which is when it becomes a finding; until then a
task costs no span object and no garbage that outlives a loop turn.

Where the parent is not sampled and the sampler drops every child of such a parent
(the SDK's default ``ParentBased``; ``ALWAYS_OFF``), no span is started at all and no
attribute is built: a task that ends inside its run makes no span object of any kind
(``made`` says None), an orphan gets a non-recording stand-in with the parent's
context (``span_of``), in which its report is logged.
The sampler is asked, once per tracer provider, through its public ``should_sample``
with an unsampled local parent (below). This module changes no record's state: the
tracker calls it from its transitions, with the end it decided (``end_span``), and it
keeps the span's parts of the record (``span``, ``parent``, ``extra``) until that end.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from .. import semconv as sc
from ..engine.records import RunRecord, TaskRecord
from ..otel_compat import SPAN_KEY, sdk_sampler_drops
from ..version import __version__
from . import span_processors as run_spans
from .metrics import NAME_CHARS, end_attributes

#: The tracer of a run started under suppress_instrumentation(): makes no span.
NO_SPANS = trace.NoOpTracer()

#: The parent the sampler is asked about: a local, valid, unsampled span context. Its
#: trace id has its low 64 bits zero, which every ``TraceIdRatioBased`` rate above 0
#: samples: a ratio delegate is never taken for one that drops every child.
_PROBE_TRACE_ID = 1 << 64
_PROBE_PARENT = trace.set_span_in_context(NonRecordingSpan(SpanContext(
    trace_id=_PROBE_TRACE_ID, span_id=1, is_remote=False, trace_flags=TraceFlags(0))))


class TaskSpans:
    """Makes the spans of one tracker's tasks, with its tracer."""

    def __init__(self, tracer_provider: trace.TracerProvider | None) -> None:
        self._provider = tracer_provider
        self.tracer = trace.get_tracer(sc.SCOPE_NAME, __version__,
                                       tracer_provider=tracer_provider,
                                       schema_url=sc.SCHEMA_URL)
        self._drops_unsampled: bool | None = None  # known once an SDK provider is

    def tracer_for(self, run: RunRecord) -> Tracer:
        """The tracer of ``run``'s own spans (the ledger's): none under suppression."""
        return NO_SPANS if run.quiet else self.tracer

    def span_of(self, record: TaskRecord, outcome: str | None = None,
                etype: str | None = None) -> Span:
        """The record's span, made now with its start time, parent and attributes
        (``outcome`` and ``error.type`` among them, when known) if not made yet. Where
        none is made (``made``), a non-recording stand-in with the parent's context:
        an orphan's report is logged in it (a logs bridge links it to the trace)."""
        span = self.made(record, outcome, etype)
        if span is None:
            span = record.span = NonRecordingSpan(
                trace.get_current_span(record.parent).get_span_context())
        return span

    def made(self, record: TaskRecord, outcome: str | None = None,
             etype: str | None = None) -> Span | None:
        """The record's span as ``span_of`` makes it, or None where no span is made at
        all (suppressed instrumentation, or a sampler that drops a child of the task's
        unsampled parent): then nothing is built, no attribute and no span object.
        A task that ends well in an unsampled trace takes this path alone."""
        span = record.span
        if span is not None:
            if outcome is not None:
                span.set_attributes(end_attributes({}, outcome, etype))
            return span
        run = record.run
        if run.quiet:
            return None
        # The task's parent span: read straight from its context where it is the SDK's
        # stand-in for a span it dropped (otel_compat.SPAN_KEY), else as the API reads it.
        parent = record.parent
        parent_span = parent.get(SPAN_KEY) if parent is not None else None
        if type(parent_span) is not NonRecordingSpan:
            parent_span = trace.get_current_span(parent)
        parent_ctx = parent_span.get_span_context()
        if (not parent_ctx.trace_flags & TraceFlags.SAMPLED and parent_ctx.is_valid
                and (self._drops_unsampled or self._drops())):
            return None
        identity = record.identity
        attrs: dict[str, Any] = {**record.series.span_attrs,
                                 sc.GEN_AI_TOOL_CALL_ID: record.call_id,
                                 sc.ADK_INVOCATION_ID: run.invocation_id}
        if run.context_attrs:
            attrs.update(run.context_attrs)
        if identity.tool_name != attrs[sc.GEN_AI_TOOL_NAME]:  # the series is _other's
            attrs[sc.GEN_AI_TOOL_NAME] = identity.tool_name[:NAME_CHARS]
        if run.conversation_id:
            attrs[sc.GEN_AI_CONVERSATION_ID] = run.conversation_id
        if record.extra:
            attrs.update(record.extra)
        if outcome is not None:
            end_attributes(attrs, outcome, etype)
        span = self.tracer.start_span(
            sc.SPAN_NAME_PREFIX + identity.tool_name[:NAME_CHARS], context=record.parent,
            kind=SpanKind.INTERNAL, attributes=attrs, start_time=record.start_ns)
        record.span = span
        return span

    def end_span(self, record: TaskRecord, outcome: str, end_ns: int, *,
                 error: BaseException | None = None, etype: str | None = None,
                 cause: str | None = None, self_cancelled: bool = False,
                 keep: bool = False) -> Span | None:
        """The span of a task that ended inside its run, as the tracker decided it
        ended: made (``made``) with ``outcome`` and ``error.type``, given the exception,
        the ERROR status and the ``cancelled`` event (with ``cause``; none for a task
        that cancelled itself; already told where the task waited for its thread
        work), and ended at ``end_ns``. None where no span is made. The record then
        lets go of what only its span needed (its parent context, captured values)
        and of the span, unless ``keep`` (strict mode: a spawned task's span is its
        child until the run ends)."""
        span = self.made(record, outcome, etype)
        if span is not None:
            if error is not None or cause is not None or self_cancelled:
                if error is not None:
                    span.record_exception(error)
                if etype is not None:
                    span.set_status(Status(StatusCode.ERROR, etype))
                if self_cancelled:
                    span.add_event(sc.EVENT_CANCELLED)  # no cause: none of them happened
                elif cause is not None and not record.waiting_for_work:  # else told already
                    span.add_event(sc.EVENT_CANCELLED, {sc.ADK_TOOL_TASK_CANCEL_CAUSE: cause})
            span.end(end_time=end_ns)
        record.parent = record.extra = None
        if not keep:
            record.span = None
        return span

    def _drops(self) -> bool:
        """Whether our sampler drops every child of an unsampled local parent.

        Asked through the sampler's public ``should_sample``, once per provider, of the
        SDK's own deterministic kinds only (``StaticSampler``: ALWAYS_ON/OFF;
        ``ParentBased``, whose decision for such a parent is its
        ``local_parent_not_sampled`` delegate, ALWAYS_OFF by default). Any other
        sampler (or a delegate that answers differently per call) cannot be known to
        drop every child from one answer: every span is started and the SDK decides.
        The SDK's types are known only to ``otel_compat.sdk_sampler_drops`` (this module
        stands on the OpenTelemetry API). Checked on opentelemetry-sdk 1.37, 1.41, 1.44
        and 1.45."""
        drops = self._drops_unsampled
        if drops is None:
            provider = self._provider or trace.get_tracer_provider()
            sampler = getattr(provider, "sampler", None)
            if sampler is None:
                return False  # a proxy until an SDK provider is installed: ask again
            try:
                drops = sdk_sampler_drops(sampler, _PROBE_PARENT, _PROBE_TRACE_ID,
                                          "tool_task", SpanKind.INTERNAL)
            except Exception:
                drops = False
            self._drops_unsampled = drops
        return drops


def read_run_start(run: RunRecord, span: Span | None) -> bool:
    """What the context and the span current at a run's start tell its record: whether
    instrumentation is suppressed there, OpenInference's context attributes, the
    run's trace, and where the run's events go (``run.span``). Returns whether
    ``span`` has a context of its own (sampled or not): a span whose end can be
    watched."""
    here = otel_context.get_current()
    run.quiet = run_spans.suppressed(here)
    run.context_attrs = run_spans.context_attributes(here)
    if span is None:
        return False
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return False
    run.trace_id = ctx.trace_id
    if span.is_recording() and not run.quiet:
        # Our events go on ADK's own run span only: another instrumentation's
        # (OpenInference's proxy) is only read.
        run.span = span if run_spans.is_adk_span(span) else NonRecordingSpan(ctx)
    return True
