"""OpenSpanProcessor: spans still open when a run ends.

A tool (or a library under it) can open a span and never end it: the span is then
never exported, and nothing shows the work it stood for. This processor remembers
spans between start and end, so that the run-end sweep can report those of the
run's trace that are still open. configure_telemetry() installs it; add it to
your own provider with ``provider.add_span_processor(OpenSpanProcessor())``.
"""

from __future__ import annotations

import weakref
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import semconv as sc

#: Scopes whose spans legitimately outlive the sweep (the run's own spans).
_RUN_SCOPES = frozenset({sc.SCOPE_NAME, "gcp.vertex.agent"})

_processors: weakref.WeakSet[OpenSpanProcessor] = weakref.WeakSet()


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

    def shutdown(self) -> None:
        self._open.clear()
        self._count = 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def open_child_spans(trace_id: int, since_ns: int) -> list[Any]:
    """Open spans of a trace, from every OpenSpanProcessor in the process."""
    found: dict[int, Any] = {}
    for proc in list(_processors):
        for s in proc.open_spans(trace_id, since_ns):
            found[s.get_span_context().span_id] = s
    return list(found.values())
