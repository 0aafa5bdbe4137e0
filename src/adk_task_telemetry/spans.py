"""Span processors: spans still open when a run ends, and the end of a run's own span.

A tool (or a library under it) can open a span and never end it: the span is then
never exported, and nothing shows the work it stood for. This processor remembers
spans between start and end, so that the run-end sweep can report those of the
run's trace that are still open. configure_telemetry() installs it; add it to
your own provider with ``provider.add_span_processor(OpenSpanProcessor())``.

``watch_end`` tells the tracker when ADK's run span ends: the one end-of-run signal
that every ADK version gives on every path, wherever ADK traces with an SDK provider.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import semconv as sc

logger = logging.getLogger(sc.LOGGER_NAME)

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
                try:
                    self.callback(run, error)
                except Exception:  # never raise into ADK's span end
                    logger.debug("run-span end callback failed", exc_info=True)


def watch_end(span: Any, run: Any, callback: Callable[[Any, BaseException | None], None]
              ) -> bool:
    """Calls ``callback(run, error)`` right after ``span`` (ADK's own run span, with a
    context of its own: sampled or not) ends, ``error`` being the exception the run
    raised through it, if any: it ends exactly when the runner's generator unwinds,
    however it unwinds (completion, error, cancellation, a caller's timeout, aclose),
    where ADK skips its plugin hooks on some of those paths. Only that one span's
    ``end`` is replaced (on the instance), so no other span pays for the watch.
    False when it cannot watch it."""
    try:
        if "end" in vars(span):  # watched already, or someone else's
            return False
        span.end = _EndWatch(span.end, run, callback)
        return True
    except (TypeError, AttributeError):  # no instance dict: a span type we do not know
        return False


def unwatch_end(span: Any) -> None:
    """The run ended by another signal: the span's end tells nothing more."""
    with contextlib.suppress(TypeError, AttributeError):
        watch = vars(span).get("end")
        if isinstance(watch, _EndWatch):
            watch.run = None
            del span.end
