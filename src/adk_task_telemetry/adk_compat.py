"""Everything that differs between the google-adk versions we support, in one place.

Supported: google-adk 1.14 (the first release with ``App``) and newer. Every
difference is detected by feature (a field, a method, a module, ADK's own source),
not by version number; ``make matrix`` checks each probe on the latest patch of every
minor since 1.14 (docs/versions.md). The one exception: where a probe must read ADK's
source and the install has none (``.pyc`` only: slim images, bundlers), that probe
answers what docs/versions.md records for the installed release (KNOWN_FACTS), and
the plugin says so once. Everything here reads ADK state defensively: a shape we do
not recognise yields ``None``, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import logging
import os
import sys
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import semconv as _sc

logger = logging.getLogger("adk_task_telemetry")
_ADK_DIR = f"{os.sep}google{os.sep}adk{os.sep}"


def _parse(v: str) -> tuple[int, int, int]:
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3]]
    major, minor, micro = [*parts, 0, 0, 0][:3]
    return major, minor, micro


try:
    ADK_VERSION_STRING = version("google-adk")
except PackageNotFoundError:  # pragma: no cover - ADK is a dependency
    ADK_VERSION_STRING = "0.0.0"
#: For display, the "newer than tested" note, and the answer of a probe that cannot
#: read ADK's source (KNOWN_FACTS); no other behaviour depends on it.
ADK_VERSION = _parse(ADK_VERSION_STRING)

#: The newest google-adk release this package was tested on (the Makefile's ADK_NEWEST).
NEWEST_TESTED_ADK = "2.13.0"
#: The oldest release supported (pyproject.toml's lower bound).
OLDEST_SUPPORTED_ADK = "1.14.0"


# --- feature probes -------------------------------------------------------------


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


#: What each probe that reads ADK's source answers on each release, as docs/versions.md
#: records it (*Where each behaviour holds*), by the installed version: the answer
#: when the function is there but its source is not (an install of ``.pyc`` files
#: only). An unknown version (no distribution metadata) is taken for the newest tested.
KNOWN_FACTS: dict[str, Callable[[tuple[int, int, int]], bool]] = {
    "live_calls_run_plugin_callbacks": lambda v: v >= (1, 27, 0),
    "live_tool_hook": lambda v: v < (1, 27, 0),
    "live_send_loop_polls": lambda v: v < (1, 22, 0),
    "failed_call_cancels_siblings": lambda v: v >= (1, 32, 0),
    "agent_tool_keeps_app_name": lambda v: v >= (1, 17, 0),
}
#: Probes answered from KNOWN_FACTS because ADK's source was not there, with the answer.
_without_source: dict[str, bool] = {}


def _known_fact(probe: str) -> bool:
    release = ADK_VERSION if ADK_VERSION > (0, 0, 0) else _parse(NEWEST_TESTED_ADK)
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


def _has_function(module: str, name: str) -> bool:
    try:
        return callable(getattr(importlib.import_module(module), name))
    except Exception:
        return False


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


_FUNCTIONS = "google.adk.flows.llm_flows.functions"
_RUNNERS = "google.adk.runners"

#: ADK keeps live background tools per function-call id
#: (``InvocationContext._active_background_tools``: the fix of issue 7058, 2.13);
#: before that, per tool name (``active_streaming_tools``).
HAS_BACKGROUND_TOOL_REGISTRY = _has_private_attr(
    "google.adk.agents.invocation_context", "InvocationContext", "_active_background_tools")
#: ``BasePlugin.on_run_error_callback`` exists (from 2.5): ADK tells plugins that a
#: run raised.
HAS_RUN_ERROR_CALLBACK = _has_attr(
    "google.adk.plugins.base_plugin", "BasePlugin", "on_run_error_callback")
#: ADK 2.x's node runtime (``google.adk.workflow``).
HAS_NODE_RUNTIME = _has_module("google.adk.workflow")
#: Live teardown stops background tools in ``BaseLlmFlow._stop_background_tool_tasks``
#: (1.39, 2.8 to 2.10).
HAS_STOP_BACKGROUND_TOOL_TASKS = _has_attr(
    "google.adk.flows.llm_flows.base_llm_flow", "BaseLlmFlow", "_stop_background_tool_tasks")
#: Live teardown cancels the run's background (streaming) tools at all: the method
#: above, or ``google.adk.live._flow_utils.stop_background_tool_tasks`` (2.11 on).
#: Without it (1.14 to 1.38, 2.0 to 2.7) every streaming call outlives its live run.
LIVE_TEARDOWN_CANCELS_BACKGROUND_TOOLS = HAS_STOP_BACKGROUND_TOOL_TASKS or _has_attr(
    "google.adk.live._flow_utils", "stop_background_tool_tasks", "__call__")
#: Live tool calls go through the plugins' before/after tool callbacks (from 1.27;
#: before that ADK calls no plugin tool callback for a live call, so the plugin cannot
#: see live tool tasks at all). Read from ADK's live call path where it has the old
#: shape; later layouts (2.9 on) moved it and always call the plugins.
LIVE_CALLS_RUN_PLUGIN_CALLBACKS = _source_probe(
    "live_calls_run_plugin_callbacks", _FUNCTIONS, "_execute_single_function_call_live",
    lambda src: src is None or "run_before_tool_callback" in src)
#: ADK runs a live run's agent in a task of its own that ends when the run does
#: (``_merge_live_event_streams``: a ``Runner`` method from 2.8, in
#: ``google.adk.live._runner_utils`` from 2.11), so the plugin sees the end of every
#: live run as that task's end (``run_task_done``).
LIVE_RUN_HAS_OWN_TASK = _has_attr(_RUNNERS, "Runner", "_merge_live_event_streams") or (
    _has_function("google.adk.live._runner_utils", "_merge_live_event_streams"))
#: The plugin wraps ``BaseAgent.run_live`` to see the end of a live run (its root
#: agent's run, ``live_teardown``): where ADK gives no signal there (1.14 to 1.39, 2.0
#: to 2.7) and the method has the shape this hook knows.
LIVE_RUN_END_HOOK = not LIVE_RUN_HAS_OWN_TASK and _shape(
    "google.adk.agents.base_agent", "BaseAgent", "run_live", inspect.isasyncgenfunction,
    ("self", "parent_context"))
#: The plugin calls its own tool callbacks around ``_process_function_live_helper``
#: (in the call's task, inside ADK's ``execute_tool`` span), where ADK calls no
#: plugin callback for a live call (1.14 to 1.26).
LIVE_TOOL_HOOK = not LIVE_CALLS_RUN_PLUGIN_CALLBACKS and _shape(
    _FUNCTIONS, None, "_process_function_live_helper", inspect.iscoroutinefunction,
    ("tool", "tool_context", "function_call", "function_args", "invocation_context")
) and _source_probe("live_tool_hook", _FUNCTIONS, "_execute_single_function_call_live",
                   lambda src: src is not None and "_process_function_live_helper(" in src)
#: A live run's send loop polls the request queue with ``asyncio.wait_for(...,
#: timeout)`` (1.14 to 1.21). On Python before 3.12 that ``wait_for`` can swallow the
#: cancel ADK's teardown sends when it lands as a poll times out: the loop goes on, and
#: the caller's ``aclose()`` of the live run never returns (with or without plugins).
LIVE_SEND_LOOP_POLLS = _source_probe(
    "live_send_loop_polls", "google.adk.flows.llm_flows.base_llm_flow",
    "BaseLlmFlow._send_to_model", lambda src: src is not None and "asyncio.wait_for(" in src)
#: What the plugin sees on a live run, with the hooks where ADK needs them: every live
#: tool call, and the run's end (every release since 1.14).
LIVE_CALLS_SEEN = LIVE_CALLS_RUN_PLUGIN_CALLBACKS or LIVE_TOOL_HOOK
LIVE_RUN_END_SEEN = LIVE_RUN_HAS_OWN_TASK or LIVE_RUN_END_HOOK


#: A failed parallel call cancels its siblings (from 1.32; before that they keep
#: running after the step raised). Before 1.32 the function gathers the call tasks
#: itself and cancels none when one raises; later layouts cancel them (2.9 on: it
#: delegates to a batch executor).
FAILED_CALL_CANCELS_SIBLINGS = _source_probe(
    "failed_call_cancels_siblings", _FUNCTIONS, "handle_function_call_list_async",
    lambda src: src is None or "asyncio.gather(" not in src or ".cancel()" in src)
#: ``Runner.close()`` closes the plugins (``PluginManager.close``, from 1.19).
RUNNER_CLOSES_PLUGINS = _has_attr(
    "google.adk.plugins.plugin_manager", "PluginManager", "close")
#: A nested ``AgentTool`` run belongs to the parent's app (from 1.17; before that its
#: app name is the child agent's name).
AGENT_TOOL_KEEPS_APP_NAME = _source_probe(
    "agent_tool_keeps_app_name", "google.adk.tools.agent_tool", "AgentTool",
    lambda src: src is None or "app_name=self.agent.name" not in src)


def features() -> dict[str, bool]:
    """Every probe and its answer on the installed ADK (docs/versions.md shows them)."""
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


def is_newer_than_tested(installed: str | None = None) -> bool:
    """The installed google-adk (or ``installed``) is newer than NEWEST_TESTED_ADK."""
    return _parse(installed or ADK_VERSION_STRING) > _parse(NEWEST_TESTED_ADK)


_newer_noted = False


def note_untested_adk() -> None:
    """Logs once per process (INFO) that the installed ADK is newer than any tested.

    The plugin keeps working: every difference it relies on is probed by feature.
    Also where the note of probes decided without ADK's source is made (once).
    """
    global _newer_noted
    note_decided_without_source()
    if _newer_noted or not is_newer_than_tested():
        return
    _newer_noted = True
    logger.info(
        "adk_task_telemetry: google-adk %s is newer than the newest tested (%s); "
        "features detected: %s", ADK_VERSION_STRING, NEWEST_TESTED_ADK,
        ", ".join(f"{k}={v}" for k, v in features().items()))


_source_noted = False


def note_decided_without_source() -> None:
    """Logs once per process (one WARNING) which probes found no ADK source to read and
    what they answered from the release's recorded facts: a detection the plugin could
    not make is never silent."""
    global _source_noted
    if _source_noted or not _without_source:
        return
    _source_noted = True
    release = ADK_VERSION_STRING if ADK_VERSION > (0, 0, 0) else (
        f"of unknown version (taken for {NEWEST_TESTED_ADK})")
    logger.warning(
        "adk_task_telemetry: google-adk %s is installed without its source files; "
        "%d feature probe(s) answered from what docs/versions.md records for that "
        "release: %s", release, len(_without_source),
        ", ".join(f"{k}={v}" for k, v in sorted(_without_source.items())))


def runner_accepts_abort_signal() -> bool:
    """``Runner.run_async(abort_signal=...)`` exists (2.x): a caller can abort a run."""
    try:
        from google.adk.runners import Runner
    except ImportError:  # pragma: no cover
        return False
    return "abort_signal" in inspect.signature(Runner.run_async).parameters


def invocation_context_of(context: Any) -> Any:
    """The InvocationContext behind a ToolContext or CallbackContext."""
    return getattr(context, "_invocation_context", None)


def session_id_of(ctx: Any) -> str | None:
    session = getattr(ctx, "session", None)
    sid = getattr(session, "id", None)
    return sid if isinstance(sid, str) else None


def agent_name_of(ctx: Any) -> str:
    agent = getattr(ctx, "agent", None)
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else ""


def tool_key(tool: Any, ctx: Any) -> tuple[Any, ...]:
    """What decides the contract's values of a call to ``tool`` in ``ctx`` (name, class,
    agent, live or not, long-running or not): the plugin works them out once per key."""
    agent = getattr(ctx, "agent", None)
    return (getattr(tool, "name", None), type(tool), getattr(agent, "name", None),
            getattr(ctx, "live_request_queue", None) is not None,
            bool(getattr(tool, "is_long_running", False)))


def is_adk_task(task: asyncio.Task[Any] | None) -> bool:
    """Whether ADK created ``task`` itself (2.x runs a live run in a task of its own).

    Such a task ends exactly when its run does; a caller's task does not.
    """
    code = getattr(task.get_coro(), "cr_code", None) if task is not None else None
    return _ADK_DIR in getattr(code, "co_filename", "")


def is_live(ctx: Any) -> bool:
    return getattr(ctx, "live_request_queue", None) is not None


def is_streaming_tool(tool: Any) -> bool:
    func = getattr(tool, "func", None)
    return func is not None and inspect.isasyncgenfunction(func)


def is_non_blocking_tool(tool: Any) -> bool:
    """Mirrors ADK's own test (2.x reads ``behavior`` first, 1.x only scheduling)."""
    behavior = getattr(tool, "behavior", None)
    if behavior is not None:
        return getattr(behavior, "name", str(behavior)) == "NON_BLOCKING"
    return getattr(tool, "response_scheduling", None) is not None


def is_long_running_tool(tool: Any) -> bool:
    return bool(getattr(tool, "is_long_running", False))


def is_stop_streaming(tool: Any) -> bool:
    """``tool`` is ADK's ``stop_streaming``: a live call of it stops a streaming tool."""
    return getattr(tool, "name", None) == "stop_streaming"


def stop_streaming_target(args: Any) -> str | None:
    """The tool name a ``stop_streaming`` call with these arguments asks to stop."""
    name = args.get("function_name") if isinstance(args, dict) else None
    return name if isinstance(name, str) else None


def streaming_task_for(ctx: Any, tool_name: str, call_id: str) -> asyncio.Task[Any] | None:
    """The background task a live streaming dispatch just created for this call.

    Read in ``after_tool_callback`` of the dispatch: ADK registers the task before
    that callback with no await in between, so even the per-name registry of the
    buggy versions still holds this call's task at that moment.
    """
    if HAS_BACKGROUND_TOOL_REGISTRY:
        entry = (getattr(ctx, "_active_background_tools", None) or {}).get(call_id)
    else:
        entry = (getattr(ctx, "active_streaming_tools", None) or {}).get(tool_name)
    task = getattr(entry, "task", None)
    return task if isinstance(task, asyncio.Task) else None


# --- hooks on the live path of frozen ADK releases --------------------------------
#
# Where a released ADK gives plugins no signal on its live path, the plugin wraps one
# ADK function there, chosen by the probes above and only on the layout each wrapper
# was written for. A wrapper calls only the listener plugins registered in that
# invocation's own plugin manager (never another plugin), never changes what ADK
# runs or returns, swallows what a listener raises, and stands aside when no listener
# is in the invocation. Installed once per process with the first listener, undone
# (the original put back, the very same object) when the last one is gone (collected,
# or removed at an uninstrument); a Runner's start or close neither installs nor undoes.

_NEEDS_HOOKS = LIVE_RUN_END_HOOK or LIVE_TOOL_HOOK
_listeners: weakref.WeakSet[Any] = weakref.WeakSet()
#: (owner, name) -> (original, wrapper) of each hook in place.
_installed: dict[tuple[Any, str], tuple[Any, Any]] = {}
#: Installs and undos of every process-wide hook: a listener's death (a weakref
#: callback) may undo them from whichever thread dropped it.
_hook_lock = threading.RLock()


def add_live_teardown_listener(listener: Any) -> None:
    """Makes ``listener`` (a TaskTelemetryPlugin) hear what this ADK does not tell
    plugins on its live path, installing the hooks it needs:

    - the end of a live run, as ``listener._on_live_teardown(ctx)`` (LIVE_RUN_END_HOOK);
    - live tool calls, as its own ``before_tool_callback``, ``after_tool_callback`` and
      ``on_tool_error_callback``, where 1.27+ calls them (LIVE_TOOL_HOOK).

    The listener is held weakly and heard for as long as it lives (a Runner's close
    does not end it: an App's plugin serves the Runners made after it); the hooks are
    undone when the last listener is gone (collected, or ``remove_live_listener``).

    Every plugin calls this from its constructor, so it is also where the once-per-
    process note about an ADK newer than the newest tested is logged.
    """
    note_untested_adk()
    hooks = _hooks()
    if not hooks:
        return
    with _hook_lock:
        if listener not in _listeners:
            _listeners.add(listener)
            weakref.finalize(listener, _live_listener_gone).atexit = False
        for owner, name, make in hooks:
            if (owner, name) not in _installed:
                original = vars(owner)[name]
                wrapper = make(original)
                setattr(owner, name, wrapper)
                _installed[(owner, name)] = (original, wrapper)


def keep_listening(listener: Any) -> None:
    """``listener`` starts a run: if it was removed (an explicit uninstrument), it
    listens again (an App's plugins outlive what removed them)."""
    if _NEEDS_HOOKS and listener not in _listeners:
        add_live_teardown_listener(listener)


def remove_live_listener(listener: Any) -> None:
    """``listener`` stops listening: once no listener is left, every hook is undone."""
    _listeners.discard(listener)
    _live_listener_gone()


def _live_listener_gone() -> None:
    with _hook_lock:
        if any(True for _ in _listeners):  # iteration skips the dead
            return
        for (owner, name), (original, wrapper) in list(_installed.items()):
            if vars(owner).get(name) is wrapper:
                setattr(owner, name, original)
                del _installed[(owner, name)]
            else:  # someone wrapped ours since: left in place, standing aside
                logger.debug("adk_task_telemetry: %s.%s was wrapped again; hook kept",
                             owner, name)


def live_hooks() -> list[str]:
    """``owner.name`` of each hook in place now (for docs and checks)."""
    return sorted(f"{getattr(o, '__name__', o)}.{n}" for o, n in _installed)


def _hooks() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    out: list[tuple[Any, str, Callable[[Any], Any]]] = []
    if LIVE_RUN_END_HOOK:
        from google.adk.agents.base_agent import BaseAgent
        out.append((BaseAgent, "run_live", _run_end_hook))
    if LIVE_TOOL_HOOK:
        out.append((importlib.import_module(_FUNCTIONS), "_process_function_live_helper",
                    _tool_call_hook))
    return out


def _listeners_of(ctx: Any) -> list[Any]:
    """The listeners registered in the invocation's plugin manager, in its order."""
    plugins = getattr(getattr(ctx, "plugin_manager", None), "plugins", None)
    if not plugins or not len(_listeners):
        return []
    ours = {id(p) for p in _listeners}
    return [p for p in plugins if id(p) in ours]


def _run_end_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``BaseAgent.run_live``: for the root agent of a live run (the Runner hands it the
    invocation's own context, whose agent it is; a transfer or a workflow hands a sub-
    agent a copy whose agent is the parent) the generator ADK reads is wrapped. Its end
    (the caller's aclose, the queue closed, an error, a cancelled consumer) comes after
    the agent's whole teardown. Looked up when the run starts, after before_run: a
    plugin that listens again from its before_run (``keep_listening``) sees that run."""

    @functools.wraps(original)
    def run_live(self: Any, parent_context: Any, *args: Any, **kwargs: Any) -> Any:
        events = original(self, parent_context, *args, **kwargs)
        try:
            root = getattr(parent_context, "agent", None) is self and is_live(parent_context)
            listeners = _listeners_of(parent_context) if root else []
        except Exception:
            listeners = []
        return _until_live_run_ends(events, parent_context) if listeners else events

    return run_live


async def _until_live_run_ends(events: Any, ctx: Any) -> AsyncGenerator[Any, None]:
    try:
        async for event in events:
            yield event
    finally:
        try:
            await events.aclose()
        finally:
            for listener in _listeners_of(ctx):
                try:
                    listener._on_live_teardown(ctx)
                except Exception:  # never break ADK's teardown
                    logger.debug("live run end listener failed", exc_info=True)


def _tool_call_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``functions._process_function_live_helper``: runs one live call's tool in the
    call's own task, inside ADK's ``execute_tool`` span; a streaming call's background
    task is registered in ``active_streaming_tools`` before it returns."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    async def _process_function_live_helper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs).arguments
            listeners = _listeners_of(bound["invocation_context"])
            call = {"tool": bound["tool"], "tool_args": bound["function_args"],
                    "tool_context": bound["tool_context"]}
        except Exception:
            listeners = []
        if not listeners:
            return await original(*args, **kwargs)
        await _tell(listeners, "before_tool_callback", call)
        try:
            result = await original(*args, **kwargs)
        except Exception as error:
            await _tell(listeners, "on_tool_error_callback", {**call, "error": error})
            raise
        await _tell(listeners, "after_tool_callback", {**call, "result": result})
        return result

    return _process_function_live_helper


async def _tell(listeners: list[Any], callback: str, kwargs: dict[str, Any]) -> None:
    for listener in listeners:
        try:
            await getattr(listener, callback)(**kwargs)
        except Exception:  # a listener never breaks the user's call
            logger.debug("live %s listener failed", callback, exc_info=True)


# --- what ADK's signals mean for a tool task --------------------------------------
#
# The tracker knows states and transitions; which ADK signal ends which task, and
# what ADK's behaviour implies about an end, is written here once.

#: Kinds that run inside one step of the run (the task running that step awaits
#: them): they cannot legitimately outlive the task that drove the step.
STEP_KINDS = frozenset({_sc.Kind.CALL, _sc.Kind.LONG_RUNNING})


def task_kind(tool: Any, ctx: Any) -> str:
    """The contract's ``adk.tool_task.kind`` of a call to ``tool`` in run ``ctx``."""
    if is_long_running_tool(tool):
        return _sc.Kind.LONG_RUNNING
    if is_live(ctx):
        if is_streaming_tool(tool):
            return _sc.Kind.STREAMING
        if is_non_blocking_tool(tool):
            return _sc.Kind.NON_BLOCKING
    return _sc.Kind.CALL


def works_in_background(kind: str) -> bool:
    """A live streaming dispatch only returns "pending": the work goes on in the
    background task ADK registers before ``after_tool_callback`` (streaming_task_for)."""
    return kind == _sc.Kind.STREAMING


def kinds_ended_by(trigger: str, driver_is_run: bool) -> frozenset[str] | None:
    """Which open tasks of a run a run-end trigger ends (None: all of them). Each
    trigger's whole rule is here, with ``caller_cut_run`` below:

    - ``after_run``, ``run_error``, ``live_teardown``, ``plugin_close`` and
      ``shutdown`` end the run. ``plugin_close`` is applied only to runs no longer
      running (``RunRecord.still_running``): ``Runner.close()`` does not stop runs
      in progress, and one plugin may serve many Runners.
    - ``run_task_done``: the task driving the run's current step ended. If ADK made
      that task for the run alone (2.x live), the run is over. If it is a caller's
      task, the caller may hand the run's generator on to another task (a
      ``wait_for(anext(...))`` per event does), so only the tasks of that step end.
    - ``run_span_end``: ADK's run span ended (all of the run's tasks end); whether
      the caller cut the run is read from what passed through it
      (``span_end_cut_run``).
    """
    if trigger == _sc.EndTrigger.RUN_TASK_DONE and not driver_is_run:
        return STEP_KINDS
    return None


#: Triggers that mean the caller stopped the run before it finished, once they end
#: it (the reason of an unanswered call whose own task explains nothing).
_CALLER_ENDS = frozenset({_sc.EndTrigger.RUN_TASK_DONE, _sc.EndTrigger.LIVE_TEARDOWN,
                          _sc.EndTrigger.PLUGIN_CLOSE})


def caller_cut_run(trigger: str) -> bool:
    """Whether a run that ``trigger`` ended was stopped by its caller (part of the
    trigger's rule: ``kinds_ended_by``). Never for ``run_span_end``, which tells it
    when the span ends (``span_end_cut_run``)."""
    return trigger in _CALLER_ENDS


def span_end_cut_run(error: BaseException | None) -> bool:
    """ADK's run span ended with ``error`` passing through it, and no other signal had
    ended the run: the caller cut it, unless the run raised an ``Exception`` (a
    ``CancelledError`` or ``GeneratorExit`` is the caller's doing)."""
    return not isinstance(error, Exception)


def cancellation_unwinds_step(error: BaseException | None) -> bool:
    """ADK's run span ended with ``error`` passing through it: a cancellation (a
    caller's timeout, a cancelled consumer) unwinds the task driving the run. ADK 1.x's
    step ``gather`` returns at its first cancelled child, so the span may end while the
    step's other tool tasks still unwind their own cancellation (an AgentTool's nested
    run takes a few loop turns): the run is over when that driving task is done."""
    return isinstance(error, asyncio.CancelledError)


def caller_closed_run() -> bool:
    """Whether ADK runs ``after_run_callback`` now because the caller closed the run.

    ADK 2.x calls it from a ``finally`` of its run generator also when the caller
    closes that generator early (``aclose()``, or asyncio's finaliser of an abandoned
    one: a ``GeneratorExit``) or stops ``Runner.run``'s thread or aborts the run (a
    ``CancelledError`` it treats as closing early); a run its caller cut otherwise
    skips after_run. That exception is in flight, with ADK's frames in its
    traceback, while the callback runs: read it there, before any await. 1.x calls
    after_run only for a completed run.
    """
    error = sys.exc_info()[1]
    if not isinstance(error, (GeneratorExit, asyncio.CancelledError)):
        return False
    tb = error.__traceback__
    while tb is not None:
        if _ADK_DIR in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def is_tool_error(error: BaseException) -> bool:
    """Whether ``on_tool_error_callback`` reports a real error. From 2.13 on ADK also
    reports a cancellation there; the task's own end tells that better."""
    return isinstance(error, Exception)


def cancel_cause(kind: str, sibling_failed: bool) -> str:
    """Why ADK cancelled a task, when nothing told us before the cancellation.

    Live background tools are cancelled by the run's teardown; a call is cancelled
    because a sibling in its step raised (ADK cancels the rest), else because the
    caller went away (timeout, cancelled consumer, aclose, abort signal).
    """
    if kind in (_sc.Kind.STREAMING, _sc.Kind.NON_BLOCKING):
        return _sc.CancelCause.RUN_TEARDOWN
    if sibling_failed:
        return _sc.CancelCause.SIBLING_FAILED
    return _sc.CancelCause.CALLER_CANCELLED


def marks_sibling_failure(kind: str) -> bool:
    """A call that raises makes ADK cancel the unfinished calls of its step."""
    return kind == _sc.Kind.CALL


# --- the call ledger: what reached the session ------------------------------------


def function_parts(event: Any) -> tuple[list[str], list[str]] | None:
    """``(call ids, response ids)`` of an event's function parts, without the calls
    ADK marks long-running (``long_running_tool_ids``: a long-running tool, a
    confirmation or credential request), which a later invocation answers. None for
    an event without any (most events: one look at its parts). Partial (streamed)
    events are skipped: their final event repeats them."""
    content = event.content
    parts = content.parts if content is not None else None
    if not parts or event.partial:
        return None
    calls: list[str] = []
    answered: list[str] = []
    for part in parts:
        fc = part.function_call
        if fc is not None:
            calls.append(fc.id or "")
        else:
            fr = part.function_response
            if fr is not None:
                answered.append(fr.id or "")
    if not calls and not answered:
        return None
    if calls:
        later = event.long_running_tool_ids
        if later:
            calls = [c for c in calls if c not in later]
    return calls, answered


def unanswered_in_session(ctx: Any, pending: dict[str, int], since_s: float
                          ) -> list[tuple[str, str, str]]:
    """``(call id, tool, author)`` of each call of ``pending`` (call id -> how many
    calls of that id the run made and saw no response to) that the session stores
    without a stored response: the session is what the next model turn reads. In the
    order the model made them.

    One pass over the session's events from the newest back to the run's start
    (``since_s``, Unix seconds; a second of slack for clocks that store events
    coarsely), looking only at the pending ids.
    """
    events = getattr(getattr(ctx, "session", None), "events", None)
    if not events:
        return []
    stored: dict[str, list[tuple[str, str]]] = {}  # newest first
    answered: dict[str, int] = {}
    floor = since_s - 1.0
    for event in reversed(events):
        if (getattr(event, "timestamp", None) or floor) < floor:
            break
        for fc in reversed(event.get_function_calls()):
            if fc.id in pending:
                stored.setdefault(fc.id, []).append((str(fc.name or ""),
                                                     str(event.author or "")))
        for fr in event.get_function_responses():
            if fr.id in pending:
                answered[fr.id] = answered.get(fr.id, 0) + 1
    out: list[tuple[str, str, str]] = []
    for call_id, made in stored.items():
        left = min(pending[call_id], len(made) - answered.get(call_id, 0))
        out.extend((call_id, tool, author) for tool, author in made[:max(left, 0)])
    return out[::-1]


# --- the tool thread pool: synchronous callables on worker threads -----------------
#
# With ``RunConfig.tool_thread_pool_config`` set, ADK runs a synchronous tool's
# callable on a ThreadPoolExecutor of its own (``_get_tool_thread_pool``: live calls
# from 1.24, run_async calls too from 2.11), through ``loop.run_in_executor``. A
# thread cannot be cancelled: when the awaiting task is, the callable runs on. The
# plugin sees each submission by wrapping ADK's pool getter (in every ADK module that
# holds it by name) and, on each pool it returns, ``submit``: the same pool, the same
# callable, the same future; only a note of the future, taken after it was queued.


def _tool_pool_getter() -> Callable[..., Any] | None:
    """ADK's ``_get_tool_thread_pool`` (each layout re-exports it from
    ``flows.llm_flows.functions``), or None on an ADK without the pool."""
    try:
        fn = getattr(importlib.import_module(_FUNCTIONS), "_get_tool_thread_pool", None)
    except Exception:
        return None
    return fn if callable(fn) else None


_POOL_GETTER = _tool_pool_getter()
#: ADK has a tool thread pool (``RunConfig.tool_thread_pool_config``, 1.24 on).
HAS_TOOL_THREAD_POOL = _POOL_GETTER is not None


def _run_async_uses_pool() -> bool:
    # The pool became the runner of every synchronous callable a call makes
    # (``_use_executor_for_sync_callables``, beside the getter: 2.11 on). Before, only
    # live calls went to the pool; run_async ran the same tool on the event loop.
    module = getattr(_POOL_GETTER, "__module__", None)
    if module is None:
        return False
    return hasattr(importlib.import_module(module), "_use_executor_for_sync_callables")


#: A run_async call to a synchronous ``FunctionTool`` runs on the pool when the run
#: config sets one (2.11 on; live calls from 1.24).
RUN_ASYNC_USES_TOOL_THREAD_POOL = HAS_TOOL_THREAD_POOL and _run_async_uses_pool()

_GETTER_NAME = "_get_tool_thread_pool"
#: The listeners, weakly: a tuple, so that a submission reads it without a lock or a
#: copy (WeakSet iteration costs more than the rest of the hook).
_pool_listeners: tuple[weakref.ref[Any], ...] = ()
#: Pools seen, each with its submissions not done yet (the saturation gauges).
_pools: weakref.WeakKeyDictionary[Any, _PoolSubmit] = weakref.WeakKeyDictionary()
_getter_hook: Callable[..., Any] | None = None


class _PoolSubmit:
    """Stands in for one pool's ``submit`` (an instance attribute, removed on restore):
    calls the class's own, then tells the listeners about the future it returned."""

    __slots__ = ("__weakref__", "inflight", "pool_ref", "submit")

    def __init__(self, pool: Any) -> None:
        self.pool_ref = weakref.ref(pool)
        self.submit: Callable[..., Any] = type(pool).submit
        #: Futures submitted and not done (set.add / set.discard are atomic: worker
        #: threads discard as they finish).
        self.inflight: set[Any] = set()

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        pool = self.pool_ref()
        work = self.submit(pool, fn, *args, **kwargs)
        try:
            self.inflight.add(work)
            work.add_done_callback(self.inflight.discard)
            for ref in _pool_listeners:
                listener = ref()
                if listener is not None:
                    listener._on_thread_work(work)
        except Exception:  # never break ADK's call
            logger.debug("thread work listener failed", exc_info=True)
        return work


def add_thread_work_listener(listener: Any) -> None:
    """Calls ``listener._on_thread_work(future)`` for each callable ADK submits to its
    tool thread pool: on the event loop's thread, in the submitting task's context
    (a tool call's task), right after the callable was queued.

    The listener is held weakly, for as long as it lives. The hooks are installed with
    the first listener and restored (by identity) when the last one is gone (collected,
    or ``remove_thread_work_listener``). Where ADK has no pool, nothing is installed.
    """
    global _pool_listeners
    if not HAS_TOOL_THREAD_POOL:
        return
    with _hook_lock:
        live = tuple(r for r in _pool_listeners if r() is not None)
        if not any(r() is listener for r in live):
            live = (*live, weakref.ref(listener, _pool_listener_gone))
        _pool_listeners = live
        _install_pool_hook()


def remove_thread_work_listener(listener: Any) -> None:
    global _pool_listeners
    with _hook_lock:
        _pool_listeners = tuple(r for r in _pool_listeners
                                if r() is not None and r() is not listener)
        if not _pool_listeners:
            _restore_pool_hook()


def _pool_listener_gone(ref: weakref.ref[Any]) -> None:
    """A listener was collected (a weakref callback, on whichever thread dropped it)."""
    global _pool_listeners
    with _hook_lock:
        _pool_listeners = tuple(r for r in _pool_listeners if r is not ref and r() is not None)
        if not _pool_listeners:
            _restore_pool_hook()


def _install_pool_hook() -> None:
    global _getter_hook
    original = _POOL_GETTER
    if _getter_hook is not None or original is None:
        return

    def _get_tool_thread_pool(*args: Any, **kwargs: Any) -> Any:
        pool = original(*args, **kwargs)
        # Not watched yet, by a hook in place (a module that took this one by name
        # after it was installed may keep it after the restore: it stands aside).
        if "submit" not in getattr(pool, "__dict__", ()) and _getter_hook is hook:
            _watch_pool(pool)
        return pool

    hook = _get_tool_thread_pool
    _get_tool_thread_pool.__wrapped__ = original  # type: ignore[attr-defined]
    _getter_hook = _get_tool_thread_pool
    _swap_getter(original, _get_tool_thread_pool)


def _restore_pool_hook() -> None:
    """Puts ADK's getter back and removes ``submit`` from every pool it returned."""
    global _getter_hook
    hook, _getter_hook = _getter_hook, None
    if hook is not None and _POOL_GETTER is not None:
        _swap_getter(hook, _POOL_GETTER)
    for pool, submit in list(_pools.items()):
        with contextlib.suppress(Exception):
            if vars(pool).get("submit") is submit:
                del pool.submit
    _pools.clear()


#: The ADK modules that hold the pool getter by name (it is imported from module to
#: module: 2.11 on, three), found once per process by the first install; each install
#: and restore after it touches only them, however many modules the process loads.
_getter_holders: list[Any] | None = None


def _swap_getter(old: Any, new: Any) -> None:
    global _getter_holders
    if _getter_holders is None:
        # ADK's modules that import the getter are imported with the one that
        # defines it (and by adk_compat's own probe, above): all of them are in by now.
        _getter_holders = [
            module for name, module in list(sys.modules.items())
            # The module's own namespace: a lazy module __getattr__ is never asked.
            if (name == "google.adk" or name.startswith("google.adk."))
            and getattr(module, "__dict__", {}).get(_GETTER_NAME) is old]
    for module in _getter_holders:
        if vars(module).get(_GETTER_NAME) is old:
            setattr(module, _GETTER_NAME, new)


def _watch_pool(pool: Any) -> None:
    if not hasattr(pool, "submit"):
        return
    try:
        if "submit" in vars(pool):  # someone else's: leave it alone
            return
        submit = _PoolSubmit(pool)
        pool.submit = submit
        _pools[pool] = submit
    except Exception:  # a pool we cannot wrap: its calls are not seen
        logger.debug("cannot watch a tool thread pool", exc_info=True)


def tool_pool_usage() -> list[tuple[int, int]]:
    """``(max_workers, calls submitted and not done)`` of each live pool seen.

    A ThreadPoolExecutor starts a thread per call up to ``max_workers`` and queues
    the rest, so ``min(in flight, max_workers)`` workers are busy and the rest wait.
    """
    out = []
    for pool, submit in list(_pools.items()):
        workers = getattr(pool, "_max_workers", None)
        if isinstance(workers, int) and not getattr(pool, "_shutdown", False):
            out.append((workers, len(submit.inflight)))
    return out
