"""Every name of the telemetry contract, in one place; docs/telemetry.md says what each
means and when it appears.

Dashboards, alert rules, tests and users depend on these strings: change one only
together with every place that uses it. tests/test_docs.py holds docs/telemetry.md to
this module both ways: a new name goes into the table of its kind there too.
"""

from __future__ import annotations

from typing import Final

SCOPE_NAME: Final = "adk_task_telemetry"
#: The semantic-conventions release whose names the contract uses (gen_ai.tool.*,
#: error.type, code.stacktrace), given to get_tracer/get_meter as the scope's schema.
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.37.0"
LOGGER_NAME: Final = "adk_task_telemetry"
#: The export machinery's own records (endpoint down, buffer dropped, exit budget), kept
#: apart so that the logs bridge never exports the export's own complaints.
EXPORT_LOGGER_NAME: Final = LOGGER_NAME + ".export"
#: The Runner hook and the instrumentor.
INSTRUMENTATION_LOGGER_NAME: Final = LOGGER_NAME + ".instrumentation"

SPAN_NAME_PREFIX: Final = "tool_task "

# Attributes set at span start.
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
ADK_APP_NAME: Final = "adk.app.name"
ADK_INVOCATION_ID: Final = "adk.invocation.id"
ADK_TOOL_TASK_KIND: Final = "adk.tool_task.kind"

# Opt-in (capture_arguments=True): the call's arguments and result, redacted and truncated.
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
# Strict mode (track_spawned_tasks=True): a span for a task a tool body spawned.
ADK_TOOL_TASK_SPAWNED: Final = "adk.tool_task.spawned"

# Attributes set at span end.
ADK_TOOL_TASK_OUTCOME: Final = "adk.tool_task.outcome"
ERROR_TYPE: Final = "error.type"

# Event attributes.
ADK_TOOL_TASK_CANCEL_CAUSE: Final = "adk.tool_task.cancel.cause"
ADK_RUN_END_TRIGGER: Final = "adk.run.end_trigger"
ADK_TOOL_TASK_AGE: Final = "adk.tool_task.age"
CODE_STACKTRACE: Final = "code.stacktrace"

# Event names.
EVENT_CANCELLED: Final = "cancelled"
EVENT_ORPHANED_TASK: Final = "orphaned_task"
# Not in the first contract: a span of the run's trace (opened under a tool task)
# still open when the run ended; on the run's span, with the open span's name and id.
EVENT_OPEN_SPAN: Final = "open_span"
OPEN_SPAN_NAME: Final = "adk.open_span.name"
OPEN_SPAN_ID: Final = "adk.open_span.id"
# Not in the first contract: the call ledger. A function call of the run with no
# function response in the session at run end: an event on the run's span (on a
# span of this name, under the run's trace, when the run's span had already ended).
EVENT_UNANSWERED_CALL: Final = "unanswered_call"
SPAN_UNANSWERED_CALL: Final = "unanswered_call"
ADK_TOOL_CALL_UNANSWERED_REASON: Final = "adk.tool_call.unanswered.reason"


class Kind:
    CALL: Final = "call"
    STREAMING: Final = "streaming"
    NON_BLOCKING: Final = "non_blocking"
    LONG_RUNNING: Final = "long_running"


class Outcome:
    OK: Final = "ok"
    ERROR: Final = "error"
    RECOVERED: Final = "recovered"
    CANCELLED: Final = "cancelled"
    ORPHANED: Final = "orphaned"


class CancelCause:
    SIBLING_FAILED: Final = "sibling_failed"
    CALLER_CANCELLED: Final = "caller_cancelled"
    RUN_TEARDOWN: Final = "run_teardown"
    STOP_STREAMING: Final = "stop_streaming"
    ORPHAN_CANCELLED: Final = "orphan_cancelled"


class UnansweredReason:
    """What became of an unanswered call's tool task: a CancelCause value, or one of
    these."""

    ERROR: Final = "error"  # its tool raised and nothing answered for it
    ORPHANED: Final = "orphaned"  # still running when the run ended
    # No task of it ended badly: none ran (the run ended first), or it ended well
    # and its response never reached the session.
    UNKNOWN: Final = "unknown"


class EndTrigger:
    AFTER_RUN: Final = "after_run"
    RUN_ERROR: Final = "run_error"
    RUN_TASK_DONE: Final = "run_task_done"
    PLUGIN_CLOSE: Final = "plugin_close"
    SHUTDOWN: Final = "shutdown"
    # A live run ended on an ADK that gives plugins no signal there: adk_compat's
    # hook (LIVE_RUN_END_HOOK; releases in HOLDS_ON), chosen by feature, reports it.
    LIVE_TEARDOWN: Final = "live_teardown"
    # ADK's own run span (``invocation``) ended and no other signal had ended the
    # run: a cancelled or failed run_async on ADK 1.x, a caller's timeout.
    RUN_SPAN_END: Final = "run_span_end"


# Not in the first contract (issue 33): a tool task seen running too long while it still
# runs. The ``stuck_task`` event on its span and the WARNING log record carry the age,
# ``code.stacktrace`` (where it waits now), which report of it this is (1, 2, ... at
# ages stuck_after x 1, 2, 4, ...) and its state; the live view (debug endpoint) gives
# the same state.
EVENT_STUCK_TASK: Final = "stuck_task"
ADK_TOOL_TASK_STUCK_REPORT: Final = "adk.tool_task.stuck.report"
ADK_TOOL_TASK_STATE: Final = "adk.tool_task.state"


class TaskState:
    """What a tool task still running is doing now (stuck records, the live view)."""

    RUNNING: Final = "running"
    CANCEL_REQUESTED: Final = "cancel_requested"  # cancel() was called; it has not ended
    ORPHANED: Final = "orphaned"  # its run ended while it runs


# Metric instruments: (name, unit, description).
METRIC_STARTED: Final = "adk.tool_task.started"
METRIC_ACTIVE: Final = "adk.tool_task.active"
METRIC_DURATION: Final = "adk.tool_task.duration"
METRIC_ORPHANED: Final = "adk.tool_task.orphaned"
METRIC_ORPHANS_ALIVE: Final = "adk.tool_task.orphans_alive"
METRIC_ORPHAN_LIFETIME: Final = "adk.tool_task.orphan_lifetime"
# Not in the first contract: tool tasks left untracked because max_open_tasks was reached.
METRIC_OVERFLOW: Final = "adk.tool_task.overflow"
# Not in the first contract: function calls without a function response at run end.
METRIC_UNANSWERED: Final = "adk.tool_call.unanswered"
UNIT_CALL: Final = "{call}"
# Not in the first contract (issue 33): an observable gauge, the age in seconds of the
# oldest tool task still running (in its run or orphaned) per series, 0 when none runs;
# read at collection, so a task costs nothing for it.
METRIC_OLDEST_AGE: Final = "adk.tool_task.oldest_age"

# Not in the first contract: telemetry the export could not deliver and dropped
# (configure_telemetry()'s pipeline), by signal and reason; recorded into that
# pipeline's own MeterProvider, so it is exported once the endpoint answers again.
METRIC_EXPORT_DROPPED: Final = "adk.export.dropped"
UNIT_ITEM: Final = "{item}"
ADK_EXPORT_SIGNAL: Final = "adk.export.signal"  # traces, metrics, logs
ADK_EXPORT_REASON: Final = "adk.export.reason"


class ExportDropReason:
    BUFFER_FULL: Final = "buffer_full"  # the outage outlasted the buffer: oldest dropped
    EXIT_BUDGET: Final = "exit_budget"  # not sent when the exit's budget ran out
    REJECTED: Final = "rejected"  # the endpoint refused the batch for good (HTTP 4xx)


# Not in the first contract: ADK's tool thread pool (RunConfig.tool_thread_pool_config),
# where synchronous tools run. Observable gauges summed over the process's pools (one
# per event loop and max_workers), without attributes: the pool is not any one tool's.
METRIC_POOL_BUSY: Final = "adk.tool_thread_pool.busy"  # threads running a call now
METRIC_POOL_QUEUED: Final = "adk.tool_thread_pool.queued"  # calls waiting for a thread
METRIC_POOL_MAX_WORKERS: Final = "adk.tool_thread_pool.max_workers"  # the pools' size
UNIT_THREAD: Final = "{thread}"

UNIT_TASK: Final = "{task}"
UNIT_SECONDS: Final = "s"

# Bucket boundaries (seconds) for both histograms: tool calls range from
# milliseconds to the minutes a streaming tool may run.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
)
