"""Everything that differs between the google-adk versions we support, in one place.

The rule: every ADK difference, and every read of ADK's objects beyond the few public
fields every supported release has, lives in this package (``from . import adk_compat as
compat``; ``compat.<name>``). Those few the plugin reads itself, as ADK's callbacks hand
them over: ``invocation_id`` of an invocation context, ``function_call_id`` of a tool
context, a tool's ``name``; the tracker reads none (the plugin hands it values,
``RunStart`` and ``ToolIdentity``, and it asks this package what ADK's signals mean).
Supported: google-adk ``OLDEST_SUPPORTED_ADK`` and newer. Every difference is detected
by feature (a field, a method, a module, ADK's own source), not by version number;
``make matrix`` checks each probe on the latest patch of every minor (docs/versions.md,
generated from ``HOLDS_ON``).

What lives where (each module imports only the ones above it in this list):

- ``versions``: the installed version, ``NEWEST_TESTED_ADK``, ``OLDEST_SUPPORTED_ADK``,
  ``ISSUE_7058_FIXED_IN``, ``HOLDS_ON`` (on which releases each probe holds: the one
  owner of every version range the package states) and ``KNOWN_FACTS`` (the answers
  of source-reading probes on an install without source).
- ``probes``: the feature probes and their flags, ``features()``.
- ``notes``: the once-per-process notes (an ADK newer than tested; probes decided
  without source).
- ``access``: attribute access to ADK's objects (``session_id_of``, ``agent_name_of``,
  ``tool_key``, ``is_*``, ``streaming_task_for``...).
- ``signals``: what ADK's signals mean for a tool task (``task_kind``,
  ``kinds_ended_by``, ``caller_closed_run``, ``cancel_cause``...).
- ``ledger``: the session reads of the call ledger (``function_parts``,
  ``unanswered_in_session``).
- ``live_path``: the hooks on the live path of old releases (``live_hooks()`` lists
  those in place).
- ``thread_pool``: the tool thread-pool hook.

What a shape this package does not recognise gives (each function's docstring says
which): a probe answers that the feature is absent (or, where its docstring says so,
that ADK has the later layout); an attribute reader gives ``None``, ``""`` or
``False``; the hooks install nothing and never raise into ADK's call; the two ledger
reads raise, and their callers catch it (``ledger``'s docstring says why).

ADK internals read, for want of a public path (checked on every minor from 1.14 to
2.13 by the probes, ``make matrix``; those marked (*) on the test releases only:
1.14.1, 1.20.0, 1.33.0, 1.39.1, 2.0.0, 2.5.0, 2.9.2, 2.12.0, 2.13.0):

- ``ToolContext`` / ``CallbackContext._invocation_context`` (*): the invocation behind a
  tool call (``access.invocation_context_of``). Public ``get_invocation_context()``
  exists from 2.0 only; 1.x has no public path.
- ``InvocationContext._active_background_tools``: the per-call registry of background
  tools, the 7058 fix (``access.streaming_task_for``, the probe
  ``background_tool_registry``). None public.
- ``BaseLlmFlow._stop_background_tool_tasks``,
  ``google.adk.live._flow_utils.stop_background_tool_tasks``: probed by name (does live
  teardown cancel background tools). No public flag.
- ``Runner._merge_live_event_streams``,
  ``google.adk.live._runner_utils._merge_live_event_streams``: probed by name (a live run
  has a task of its own). No public flag.
- The source of ``functions._execute_single_function_call_live``,
  ``BaseLlmFlow._send_to_model``, ``functions.handle_function_call_list_async`` and
  ``AgentTool``: behaviour inside a function that no flag or API marks (source probes;
  without source, ``KNOWN_FACTS``).
- ``functions._process_function_live_helper``: wrapped by the live tool hook; ADK calls
  no plugin callback there on those releases. ``BaseAgent.run_live`` (public) is
  wrapped by the live run-end hook.
- ``functions._get_tool_thread_pool`` (wrapped) and ``_use_executor_for_sync_callables``
  (probed by name): the thread-pool hook. No public hook.
- ``ThreadPoolExecutor._max_workers`` and ``._shutdown`` (Python's own, not ADK's): the
  pool saturation gauges. No public reader.
- ``/google/adk/`` in a code object's file name (*): whether ADK made a task
  (``is_adk_task``) or raised the exception in flight (``caller_closed_run``).

``inspect.getsource`` is called in one function only, ``probes._source_probe``; on an
install without source its probes answer ``KNOWN_FACTS`` and say so once (WARNING;
tests/test_sourceless_install.py).
"""

from __future__ import annotations

from .access import (
    agent_name_of,
    invocation_context_of,
    is_adk_task,
    is_live,
    is_long_running_tool,
    is_non_blocking_tool,
    is_stop_streaming,
    is_streaming_tool,
    session_id_of,
    stop_streaming_target,
    streaming_task_for,
    tool_key,
)
from .ledger import function_parts, unanswered_in_session
from .live_path import (
    LiveRunListener,
    add_live_teardown_listener,
    keep_listening,
    live_hooks,
    remove_live_listener,
)
from .notes import fresh_notes, note_decided_without_source, note_untested_adk
from .probes import (
    AGENT_TOOL_KEEPS_APP_NAME,
    FAILED_CALL_CANCELS_SIBLINGS,
    HAS_BACKGROUND_TOOL_REGISTRY,
    HAS_NODE_RUNTIME,
    HAS_RUN_ERROR_CALLBACK,
    HAS_STOP_BACKGROUND_TOOL_TASKS,
    HAS_TOOL_THREAD_POOL,
    LIVE_CALLS_RUN_PLUGIN_CALLBACKS,
    LIVE_CALLS_SEEN,
    LIVE_RUN_END_HOOK,
    LIVE_RUN_END_SEEN,
    LIVE_RUN_HAS_OWN_TASK,
    LIVE_SEND_LOOP_POLLS,
    LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS,
    LIVE_TOOL_HOOK,
    RUN_ASYNC_USES_TOOL_THREAD_POOL,
    RUNNER_CLOSES_PLUGINS,
    decided_without_source,
    features,
    runner_accepts_abort_signal,
)
from .signals import (
    STEP_KINDS,
    caller_closed_run,
    caller_cut_run,
    cancel_cause,
    cancellation_in_flight,
    cancellation_unwinds_step,
    cancelled_itself,
    is_tool_error,
    kinds_ended_by,
    marks_sibling_failure,
    span_end_cut_run,
    task_kind,
    works_in_background,
)
from .thread_pool import (
    ThreadWorkListener,
    add_thread_work_listener,
    remove_thread_work_listener,
    tool_pool_usage,
)
from .versions import (
    ADK_VERSION,
    ADK_VERSION_STRING,
    HOLDS_ON,
    ISSUE_7058_FIXED_IN,
    KNOWN_FACTS,
    NEWEST_TESTED_ADK,
    OLDEST_SUPPORTED_ADK,
    holds,
    is_newer_than_tested,
    parse_version,
)

__all__ = [
    "ADK_VERSION",
    "ADK_VERSION_STRING",
    "AGENT_TOOL_KEEPS_APP_NAME",
    "FAILED_CALL_CANCELS_SIBLINGS",
    "HAS_BACKGROUND_TOOL_REGISTRY",
    "HAS_NODE_RUNTIME",
    "HAS_RUN_ERROR_CALLBACK",
    "HAS_STOP_BACKGROUND_TOOL_TASKS",
    "HAS_TOOL_THREAD_POOL",
    "HOLDS_ON",
    "ISSUE_7058_FIXED_IN",
    "KNOWN_FACTS",
    "LIVE_CALLS_RUN_PLUGIN_CALLBACKS",
    "LIVE_CALLS_SEEN",
    "LIVE_RUN_END_HOOK",
    "LIVE_RUN_END_SEEN",
    "LIVE_RUN_HAS_OWN_TASK",
    "LIVE_SEND_LOOP_POLLS",
    "LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS",
    "LIVE_TOOL_HOOK",
    "NEWEST_TESTED_ADK",
    "OLDEST_SUPPORTED_ADK",
    "RUNNER_CLOSES_PLUGINS",
    "RUN_ASYNC_USES_TOOL_THREAD_POOL",
    "STEP_KINDS",
    "LiveRunListener",
    "ThreadWorkListener",
    "add_live_teardown_listener",
    "add_thread_work_listener",
    "agent_name_of",
    "caller_closed_run",
    "caller_cut_run",
    "cancel_cause",
    "cancellation_in_flight",
    "cancellation_unwinds_step",
    "cancelled_itself",
    "decided_without_source",
    "features",
    "fresh_notes",
    "function_parts",
    "holds",
    "invocation_context_of",
    "is_adk_task",
    "is_live",
    "is_long_running_tool",
    "is_newer_than_tested",
    "is_non_blocking_tool",
    "is_stop_streaming",
    "is_streaming_tool",
    "is_tool_error",
    "keep_listening",
    "kinds_ended_by",
    "live_hooks",
    "marks_sibling_failure",
    "note_decided_without_source",
    "note_untested_adk",
    "parse_version",
    "remove_live_listener",
    "remove_thread_work_listener",
    "runner_accepts_abort_signal",
    "session_id_of",
    "span_end_cut_run",
    "stop_streaming_target",
    "streaming_task_for",
    "task_kind",
    "tool_key",
    "tool_pool_usage",
    "unanswered_in_session",
    "works_in_background",
]
