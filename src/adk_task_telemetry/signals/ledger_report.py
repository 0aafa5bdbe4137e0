"""The call ledger: function calls the model made that got no function response.

A call left without a response stays in the session as a ``function_call`` with no
``function_response`` (ADK cancelled a slow sibling of a call that raised, a caller
timed out mid-tool, an orphan never answered); the next model turn on that session
is then refused by Gemini (400: every function call needs its response).

The run's own events tell which calls it made (``Tracker.calls_seen``, from
``on_event_callback``): a run whose calls were all answered has nothing to check, and
two runs that share an invocation id never count each other's calls. Only a run left
with calls seen unanswered reads the session, to report just the calls stored there
without a stored response. Each one is told as an ``unanswered_call`` event, a
WARNING log record and the ``adk.tool_call.unanswered`` counter.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import adk_compat as compat
from .. import semconv as sc
from ..engine.records import UnansweredCall

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from ..engine.records import RunRecord
    from .metrics import Metrics

logger = logging.getLogger(sc.LOGGER_NAME)

#: Unanswered calls told per run at most; the counter counts them all.
MAX_TOLD_PER_RUN = 100


def unanswered_calls(run: RunRecord, trigger: str) -> list[tuple[UnansweredCall, str]]:
    """The run's calls stored without a response, each with its reason (below), and
    the agent that made it."""
    ctx = run.owner_ref() if run.owner_ref is not None else None
    pending = run.calls
    if ctx is None or not pending:
        return []
    missing = compat.unanswered_in_session(ctx, pending, run.start_ns / 1e9)
    unhappy = run.unhappy or {}
    fallback = _run_reason(run)
    return [(UnansweredCall(run.invocation_id, run.app_name, call_id, tool,
                            unhappy.get(call_id, fallback), trigger), author)
            for call_id, tool, author in missing]


def _run_reason(run: RunRecord) -> str:
    """Why a call whose own task explains nothing (it ended well, or never ran) has
    no response: what ended the run before the response was stored."""
    if run.sibling_failed:
        return sc.CancelCause.SIBLING_FAILED
    if run.cut_by_caller:
        return sc.CancelCause.CALLER_CANCELLED
    return sc.UnansweredReason.UNKNOWN


def report_unanswered(run: RunRecord, found: list[tuple[UnansweredCall, str]],
                      tracer: Tracer, metrics: Metrics) -> None:
    """Tells each unanswered call: on the run's span while it records, else on an
    ``unanswered_call`` span of ours in the run's trace (a run cancelled by its caller
    ends ADK's span before we can learn the run is over)."""
    run_span = run.span if run.span is not None and run.span.is_recording() else None
    for n, (call, author) in enumerate(found):
        if n >= MAX_TOLD_PER_RUN:
            metrics.unanswered(call.tool_name, author, call.app_name, call.reason, run_span)
            continue
        attrs: dict[str, Any] = {
            sc.GEN_AI_TOOL_CALL_ID: call.call_id,
            sc.GEN_AI_TOOL_NAME: call.tool_name,
            sc.ADK_INVOCATION_ID: call.invocation_id,
            sc.ADK_TOOL_CALL_UNANSWERED_REASON: call.reason,
            sc.ADK_RUN_END_TRIGGER: call.trigger,
        }
        span = run_span or _own_span(run, tracer, attrs)
        span.add_event(sc.EVENT_UNANSWERED_CALL, attrs)
        # The exemplar links the counter to the span that carries the event.
        metrics.unanswered(call.tool_name, author, call.app_name, call.reason, span)
        with trace.use_span(span, end_on_exit=span is not run_span):
            logger.warning(
                "unanswered function call: tool=%s call_id=%s invocation=%s reason=%s "
                "trigger=%s (the session keeps the call without a response; the next "
                "model turn on this session may be refused)", call.tool_name, call.call_id,
                call.invocation_id, call.reason, call.trigger, extra=attrs)


def _own_span(run: RunRecord, tracer: Tracer, attrs: dict[str, Any]) -> Span:
    parent = trace.set_span_in_context(run.span) if run.span is not None else None
    span = tracer.start_span(sc.SPAN_UNANSWERED_CALL, context=parent, kind=SpanKind.INTERNAL,
                             attributes=attrs)
    span.set_status(Status(StatusCode.ERROR, "function call without a function response"))
    return span
