"""Span processors: spans still open when a run ends, and the end of a run's own span.

A tool (or a library under it) can open a span and never end it: the span is then
never exported, and nothing shows the work it stood for. This processor remembers
spans between start and end, so that the run-end sweep can report those of the
run's trace that are still open. configure_telemetry() installs it; add it to
your own provider with ``provider.add_span_processor(OpenSpanProcessor())``.

``watch_end`` tells the tracker when the run's span ends: the one end-of-run signal
that every ADK version gives on every path, wherever ADK traces with an SDK provider.
ADK's own run span (scope ``gcp.vertex.agent``) is watched on the instance; another
instrumentation's span current at the run's start (OpenInference's, a wrapt proxy of
an SDK span, where its instrumentor replaced ADK's run span: ``invoke_workflow`` on
google-adk 2.13) is only read, never changed: its end is seen by this module's
``OpenSpanProcessor`` where one saw it start.

``suppressed`` and ``context_attributes`` read what other instrumentations put in the
OpenTelemetry context: the key of ``suppress_instrumentation()``, and OpenInference's
``using_attributes`` values.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import NonRecordingSpan

from .. import semconv as sc

logger = logging.getLogger(sc.LOGGER_NAME)

#: ADK's tracer (and meter) scope on every version: its run span is made under it.
ADK_SCOPE = "gcp.vertex.agent"
#: Scopes whose spans legitimately outlive the sweep (the run's own spans).
_RUN_SCOPES = frozenset({sc.SCOPE_NAME, ADK_SCOPE})

_processors: weakref.WeakSet[OpenSpanProcessor] = weakref.WeakSet()
#: Spans whose end ends a run, seen through OpenSpanProcessor.on_end (another
#: instrumentation's spans, never changed): (trace id, span id) -> (run, callback).
_end_watches: dict[tuple[int, int], tuple[Any, Callable[[Any, BaseException | None], None]]] = {}

#: The context keys of OpenTelemetry's ``suppress_instrumentation()``: the API's key,
#: and the plain one it also sets for older instrumentations.
_SUPPRESS_PLAIN_KEY = "suppress_instrumentation"
_SUPPRESS_KEY: str = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", _SUPPRESS_PLAIN_KEY)
#: OpenInference's context attributes (``using_attributes``: session, user, metadata,
#: tags), set as OpenTelemetry context values under the attribute's own name. Its
#: instrumentors copy them onto every span; so does the plugin, onto its own.
OPENINFERENCE_CONTEXT_KEYS = ("session.id", "user.id", "metadata", "tag.tags")


class OpenSpanProcessor(SpanProcessor):
    """Keeps the spans that started and have not ended yet (at most ``max_spans``)."""

    def __init__(self, max_spans: int = 10_000) -> None:
        # trace id -> span id -> span: a sweep reads its own trace only. Single
        # dict operations are atomic in CPython, so spans ended on other threads
        # need no lock here (a lost race loses one report, never raises).
        self._open: dict[int, dict[int, Span]] = {}
        self._count = 0
        self._max = max_spans
        _processors.add(self)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._count < self._max:
            ctx = span.get_span_context()
            self._open.setdefault(ctx.trace_id, {})[ctx.span_id] = span
            self._count += 1

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.get_span_context()
        if ctx is None:
            return
        if _end_watches:
            watch = _end_watches.pop((ctx.trace_id, ctx.span_id), None)
            if watch is not None:
                _ended(watch[0], watch[1], sys.exc_info()[1])
        spans = self._open.get(ctx.trace_id)
        if spans is not None and spans.pop(ctx.span_id, None) is not None:
            self._count -= 1
            if not spans:
                self._open.pop(ctx.trace_id, None)

    def open_spans(self, trace_id: int, since_ns: int) -> list[Span]:
        """Spans of ``trace_id`` opened after ``since_ns`` and still open, but the
        run's own (ADK's and ours)."""
        spans = list((self._open.get(trace_id) or {}).values())
        out = []
        for s in spans:
            scope = s.instrumentation_scope.name if s.instrumentation_scope else ""
            if scope not in _RUN_SCOPES and (s.start_time or 0) >= since_ns:
                out.append(s)
        return out

    def holds(self, span: Any) -> bool:
        """Whether ``span`` (an SDK span) started under this processor and is open."""
        ctx = span.get_span_context()
        return (self._open.get(ctx.trace_id) or {}).get(ctx.span_id) is span

    def shutdown(self) -> None:
        self._open.clear()
        self._count = 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def has_processors() -> bool:
    return bool(_processors)


def open_child_spans(trace_id: int, since_ns: int) -> list[Any]:
    """Open spans of a trace, from every OpenSpanProcessor in the process."""
    found: dict[int, Any] = {}
    for proc in list(_processors):
        for s in proc.open_spans(trace_id, since_ns):
            found[s.get_span_context().span_id] = s
    return list(found.values())


class _EndWatch:
    """Stands in for one span's ``end`` (an instance attribute, so no other span pays
    anything): ends the span, then tells the tracker, once."""

    __slots__ = ("callback", "original", "run")

    def __init__(self, original: Callable[..., None], run: Any,
                 callback: Callable[[Any, BaseException | None], None]) -> None:
        self.original = original
        self.run = run
        self.callback = callback

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        # Called from the ``finally`` of ADK's ``start_as_current_span``: what is
        # propagating through the run's span now is how the run ended.
        error = sys.exc_info()[1]
        try:
            self.original(*args, **kwargs)
        finally:
            run, self.run = self.run, None
            span = getattr(self.original, "__self__", None)
            if span is not None and vars(span).get("end") is self:
                del span.end  # the class's own end again
            if run is not None:
                _ended(run, self.callback, error)


def _ended(run: Any, callback: Callable[[Any, BaseException | None], None],
           error: BaseException | None) -> None:
    try:
        callback(run, error)
    except Exception:  # never raise into a span's end
        logger.debug("run-span end callback failed", exc_info=True)


def unwrapped(span: Any) -> Any:
    """The span behind ``span``, through any proxies (wrapt's ``__wrapped__``): only
    read, never changed."""
    for _ in range(8):
        inner = getattr(span, "__wrapped__", None)
        if inner is None:
            break
        span = inner
    return span


def is_adk_span(span: Any) -> bool:
    """Whether ``span``, current at a run's start, is ADK's own run span object: made
    by ADK's tracer (its scope says so), not a proxy of another instrumentation. A
    span the sampler dropped has no scope to read: a local one (not a remote parent)
    current there is taken for ADK's, as it is wherever ADK traces."""
    cls = type(span)  # a proxy's own type, whatever ``__class__`` it shows
    if issubclass(cls, Span):
        scope = span.instrumentation_scope
        return scope is not None and scope.name == ADK_SCOPE
    return cls is NonRecordingSpan and not span.get_span_context().is_remote


def watch_end(span: Any, run: Any, callback: Callable[[Any, BaseException | None], None]
              ) -> Any | None:
    """Calls ``callback(run, error)`` right after ``span`` (the span current at the
    run's start, with a context of its own: sampled or not) ends, ``error`` being the
    exception the run raised through it, if any: it ends exactly when the runner's
    generator unwinds, however it unwinds (completion, error, cancellation, a caller's
    timeout, aclose), where ADK skips its plugin hooks on some of those paths.

    ADK's own run span: only that one span's ``end`` is replaced (on the instance), so
    no other span pays for the watch. Any other span (another instrumentation's, such
    as OpenInference's proxy) is left exactly as it is: its end is seen
    by an ``OpenSpanProcessor`` that saw it start, if one did. Returns what to hand
    ``unwatch_end`` (the span watched), or None when it cannot watch it."""
    if is_adk_span(span):
        try:
            if "end" in vars(span):  # watched already, or someone else's
                return None
            span.end = _EndWatch(span.end, run, callback)
            return span
        except (TypeError, AttributeError):  # no instance dict: a span type we do not know
            return None
    inner = unwrapped(span)
    if not any(proc.holds(inner) for proc in list(_processors)):
        return None
    ctx = inner.get_span_context()
    key = (ctx.trace_id, ctx.span_id)
    if key in _end_watches:
        return None
    _end_watches[key] = (run, callback)
    return inner


def unwatch_end(span: Any) -> None:
    """The run ended by another signal: the span's end tells nothing more."""
    if _end_watches:
        ctx = span.get_span_context()
        _end_watches.pop((ctx.trace_id, ctx.span_id), None)
    # Only ADK's run span carries an _EndWatch of its own (watch_end): no need to ask
    # whose span it is (a proxy's vars may show the wrapped span's: not its own).
    with contextlib.suppress(TypeError, AttributeError):
        watch = vars(span).get("end")
        if isinstance(watch, _EndWatch) and getattr(watch.original, "__self__", None) is span:
            watch.run = None
            delattr(span, "end")  # the class's own end again


def suppressed(ctx: Context | None = None) -> bool:
    """Whether instrumentation is suppressed in ``ctx`` (default: the current context):
    inside OpenTelemetry's ``suppress_instrumentation()``, which exporters and other
    instrumentations use so that their own work is not traced."""
    get = (otel_context.get_current() if ctx is None else ctx).get
    return bool(get(_SUPPRESS_KEY) or get(_SUPPRESS_PLAIN_KEY))


def context_attributes(ctx: Context | None = None) -> dict[str, Any] | None:
    """OpenInference's context attributes set in ``ctx`` (default: the current
    context), as span attributes; None when none is (or OpenInference is not used).
    Read by name: OpenInference need not be installed."""
    get = (otel_context.get_current() if ctx is None else ctx).get
    values = [get(key) for key in OPENINFERENCE_CONTEXT_KEYS]
    if values.count(None) == len(values):
        return None
    found: dict[str, Any] = {}
    for key, value in zip(OPENINFERENCE_CONTEXT_KEYS, values, strict=True):
        if isinstance(value, str):
            found[key] = value
        elif (isinstance(value, (list, tuple)) and value
              and all(isinstance(v, str) for v in value)):
            found[key] = list(value)
    return found or None
