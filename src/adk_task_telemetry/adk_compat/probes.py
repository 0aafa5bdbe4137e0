"""Feature probes: what the installed google-adk has, each detected by feature (a field,
a method, a module, a function's shape, ADK's own source), never by version number.
On which releases each one holds is ``versions.HOLDS_ON`` (docs/versions.md).

A probe that cannot find what it looks for answers as its docstring says (mostly
False: the feature is absent), never with an exception. The one exception to
"by feature": where a probe must read ADK's source and the install has none (``.pyc``
only: slim images, bundlers), it answers ``versions.KNOWN_FACTS`` for the installed
release, and the plugin says so once (``notes.note_decided_without_source``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from .versions import ADK_VERSION, KNOWN_FACTS, NEWEST_TESTED_ADK, parse_version

FUNCTIONS_MODULE = "google.adk.flows.llm_flows.functions"
_RUNNERS = "google.adk.runners"


def _has_attr(module: str, cls: str, attr: str) -> bool:
    try:
        obj = getattr(importlib.import_module(module), cls)
    except Exception:  # an ADK without that module or class
        return False
    return hasattr(obj, attr)


def _has_private_attr(module: str, cls: str, attr: str) -> bool:
    """A pydantic model class declares private attribute ``attr``."""
    try:
        obj = getattr(importlib.import_module(module), cls)
    except Exception:
        return False
    return attr in (getattr(obj, "__private_attributes__", None) or {})


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:  # a parent package that does not exist
        return False


def _has_function(module: str, name: str) -> bool:
    try:
        return callable(getattr(importlib.import_module(module), name))
    except Exception:
        return False


#: Probes answered from KNOWN_FACTS because ADK's source was not there, with the answer.
_without_source: dict[str, bool] = {}


def _known_fact(probe: str) -> bool:
    release = ADK_VERSION if ADK_VERSION > (0, 0, 0) else parse_version(NEWEST_TESTED_ADK)
    answer = KNOWN_FACTS[probe](release)
    _without_source[probe] = answer
    return answer


def _source_probe(probe: str, module: str, func: str,
                  decide: Callable[[str | None], bool]) -> bool:
    """``decide(source)`` of ADK's ``module.func`` (``Class.method`` too; source None:
    it is not there, a later layout). The only place the package reads ADK's source:
    where the function is there and its source is not, the answer is the release's
    recorded fact (KNOWN_FACTS[probe])."""
    try:
        fn: Any = importlib.import_module(module)
        for name in func.split("."):
            fn = getattr(fn, name)
    except Exception:  # moved or renamed
        return decide(None)
    try:
        source = inspect.getsource(fn)
    except Exception:  # compiled only (OSError), or not a source-backed object
        return _known_fact(probe)
    return decide(source)


def decided_without_source() -> dict[str, bool]:
    """The probes that could not read ADK's source (an install of ``.pyc`` files only)
    and answered from the release's recorded facts, with their answers; empty on a
    normal install."""
    return dict(_without_source)


def _shape(module: str, cls: str | None, name: str, kind: Callable[[Any], bool],
           params: tuple[str, ...]) -> bool:
    """ADK's ``module.cls.name`` (``cls`` None: a module function) is defined right
    there, is of ``kind`` and takes ``params`` first: the layout a hook was written for."""
    try:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls is not None else owner
        fn = vars(owner)[name]
        return kind(fn) and tuple(inspect.signature(fn).parameters)[:len(params)] == params
    except Exception:
        return False


# Each flag below is one probe of ``features()``; ``versions.HOLDS_ON`` names the
# releases where it holds.

#: ADK keeps live background tools per function-call id
#: (``InvocationContext._active_background_tools``: the fix of issue 7058); before
#: that, per tool name (``active_streaming_tools``).
HAS_BACKGROUND_TOOL_REGISTRY = _has_private_attr(
    "google.adk.agents.invocation_context", "InvocationContext", "_active_background_tools")
#: ``BasePlugin.on_run_error_callback`` exists: ADK tells plugins that a run raised.
HAS_RUN_ERROR_CALLBACK = _has_attr(
    "google.adk.plugins.base_plugin", "BasePlugin", "on_run_error_callback")
#: ADK 2.x's node runtime (``google.adk.workflow``).
HAS_NODE_RUNTIME = _has_module("google.adk.workflow")
#: Live teardown stops background tools in ``BaseLlmFlow._stop_background_tool_tasks``.
HAS_STOP_BACKGROUND_TOOL_TASKS = _has_attr(
    "google.adk.flows.llm_flows.base_llm_flow", "BaseLlmFlow", "_stop_background_tool_tasks")
#: Live teardown cancels the run's background (streaming) tools at all: the method
#: above, or ``google.adk.live._flow_utils.stop_background_tool_tasks`` (the later
#: layout). Without it every streaming call outlives its live run.
LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS = HAS_STOP_BACKGROUND_TOOL_TASKS or _has_attr(
    "google.adk.live._flow_utils", "stop_background_tool_tasks", "__call__")
#: Live tool calls go through the plugins' before/after tool callbacks (before that
#: ADK calls no plugin tool callback for a live call, so the plugin cannot see live
#: tool tasks without LIVE_TOOL_HOOK). Read from ADK's live call path where it has the
#: old shape; later layouts moved it and always call the plugins (source None: True).
LIVE_CALLS_RUN_PLUGIN_CALLBACKS = _source_probe(
    "live_calls_run_plugin_callbacks", FUNCTIONS_MODULE, "_execute_single_function_call_live",
    lambda src: src is None or "run_before_tool_callback" in src)
#: ADK runs a live run's agent in a task of its own that ends when the run does
#: (``_merge_live_event_streams``: a ``Runner`` method, later in
#: ``google.adk.live._runner_utils``), so the plugin sees the end of every live run as
#: that task's end (``run_task_done``).
LIVE_RUN_HAS_OWN_TASK = _has_attr(_RUNNERS, "Runner", "_merge_live_event_streams") or (
    _has_function("google.adk.live._runner_utils", "_merge_live_event_streams"))
#: The plugin wraps ``BaseAgent.run_live`` to see the end of a live run (its root
#: agent's run, ``live_teardown``): where ADK gives no signal there (not
#: LIVE_RUN_HAS_OWN_TASK) and the method has the shape this hook knows.
LIVE_RUN_END_HOOK = not LIVE_RUN_HAS_OWN_TASK and _shape(
    "google.adk.agents.base_agent", "BaseAgent", "run_live", inspect.isasyncgenfunction,
    ("self", "parent_context"))
#: The plugin calls its own tool callbacks around ``_process_function_live_helper``
#: (in the call's task, inside ADK's ``execute_tool`` span), where ADK calls no
#: plugin callback for a live call (not LIVE_CALLS_RUN_PLUGIN_CALLBACKS).
LIVE_TOOL_HOOK = not LIVE_CALLS_RUN_PLUGIN_CALLBACKS and _shape(
    FUNCTIONS_MODULE, None, "_process_function_live_helper", inspect.iscoroutinefunction,
    ("tool", "tool_context", "function_call", "function_args", "invocation_context")
) and _source_probe("live_tool_hook", FUNCTIONS_MODULE, "_execute_single_function_call_live",
                   lambda src: src is not None and "_process_function_live_helper(" in src)
#: A live run's send loop polls the request queue with ``asyncio.wait_for(...,
#: timeout)``. On Python before 3.12 that ``wait_for`` can swallow the cancel ADK's
#: teardown sends when it lands as a poll times out: the loop goes on, and the
#: caller's ``aclose()`` of the live run never returns (with or without plugins).
LIVE_SEND_LOOP_POLLS = _source_probe(
    "live_send_loop_polls", "google.adk.flows.llm_flows.base_llm_flow",
    "BaseLlmFlow._send_to_model", lambda src: src is not None and "asyncio.wait_for(" in src)
#: What the plugin sees on a live run, with the hooks where ADK needs them: every live
#: tool call, and the run's end (every supported release).
LIVE_CALLS_SEEN = LIVE_CALLS_RUN_PLUGIN_CALLBACKS or LIVE_TOOL_HOOK
LIVE_RUN_END_SEEN = LIVE_RUN_HAS_OWN_TASK or LIVE_RUN_END_HOOK

#: A failed parallel call cancels its siblings (before, they keep running after the
#: step raised). The old layout gathers the call tasks in this function itself and
#: cancels none when one raises; later layouts cancel them (they delegate to a batch
#: executor: source without ``asyncio.gather(``).
FAILED_CALL_CANCELS_SIBLINGS = _source_probe(
    "failed_call_cancels_siblings", FUNCTIONS_MODULE, "handle_function_call_list_async",
    lambda src: src is None or "asyncio.gather(" not in src or ".cancel()" in src)
#: ``Runner.close()`` closes the plugins (``PluginManager.close``).
RUNNER_CLOSES_PLUGINS = _has_attr(
    "google.adk.plugins.plugin_manager", "PluginManager", "close")
#: A nested ``AgentTool`` run belongs to the parent's app (before, its app name is the
#: child agent's name).
AGENT_TOOL_KEEPS_APP_NAME = _source_probe(
    "agent_tool_keeps_app_name", "google.adk.tools.agent_tool", "AgentTool",
    lambda src: src is None or "app_name=self.agent.name" not in src)


def _tool_pool_getter() -> Callable[..., Any] | None:
    """ADK's ``_get_tool_thread_pool`` (each layout re-exports it from
    ``flows.llm_flows.functions``), or None on an ADK without the pool."""
    try:
        fn = getattr(importlib.import_module(FUNCTIONS_MODULE), "_get_tool_thread_pool", None)
    except Exception:
        return None
    return fn if callable(fn) else None


#: ADK's tool thread-pool getter (``thread_pool.py`` hooks it), None without one.
POOL_GETTER = _tool_pool_getter()
#: ADK has a tool thread pool (``RunConfig.tool_thread_pool_config``).
HAS_TOOL_THREAD_POOL = POOL_GETTER is not None


def _run_async_uses_pool() -> bool:
    """The pool became the runner of every synchronous callable a call makes
    (``_use_executor_for_sync_callables``, beside the getter). Before, only live calls
    went to the pool; run_async ran the same tool on the event loop. False where the
    getter's module cannot be read."""
    module = getattr(POOL_GETTER, "__module__", None)
    if module is None:
        return False
    try:
        return hasattr(importlib.import_module(module), "_use_executor_for_sync_callables")
    except Exception:
        return False


#: A run_async call to a synchronous ``FunctionTool`` runs on the pool when the run
#: config sets one (live calls do wherever HAS_TOOL_THREAD_POOL).
RUN_ASYNC_USES_TOOL_THREAD_POOL = HAS_TOOL_THREAD_POOL and _run_async_uses_pool()


def runner_accepts_abort_signal() -> bool:
    """``Runner.run_async(abort_signal=...)`` exists: a caller can abort a run. False
    where the Runner or its signature cannot be read."""
    try:
        from google.adk.runners import Runner
        return "abort_signal" in inspect.signature(Runner.run_async).parameters
    except Exception:  # pragma: no cover - a layout without them
        return False


def features() -> dict[str, bool]:
    """Every probe and its answer on the installed ADK (docs/versions.md shows them;
    ``versions.HOLDS_ON`` has a range for each)."""
    return {
        "background_tool_registry": HAS_BACKGROUND_TOOL_REGISTRY,
        "run_error_callback": HAS_RUN_ERROR_CALLBACK,
        "node_runtime": HAS_NODE_RUNTIME,
        "stop_background_tool_tasks": HAS_STOP_BACKGROUND_TOOL_TASKS,
        "live_teardown_cancels_background_tools": LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS,
        "live_run_has_own_task": LIVE_RUN_HAS_OWN_TASK,
        "live_run_end_hook": LIVE_RUN_END_HOOK,
        "live_tool_hook": LIVE_TOOL_HOOK,
        "live_send_loop_polls": LIVE_SEND_LOOP_POLLS,
        "live_calls_run_plugin_callbacks": LIVE_CALLS_RUN_PLUGIN_CALLBACKS,
        "failed_call_cancels_siblings": FAILED_CALL_CANCELS_SIBLINGS,
        "runner_closes_plugins": RUNNER_CLOSES_PLUGINS,
        "agent_tool_keeps_app_name": AGENT_TOOL_KEEPS_APP_NAME,
        "abort_signal": runner_accepts_abort_signal(),
        "tool_thread_pool": HAS_TOOL_THREAD_POOL,
        "run_async_tool_thread_pool": RUN_ASYNC_USES_TOOL_THREAD_POOL,
    }
