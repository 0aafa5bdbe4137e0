"""The tool thread-pool hook: synchronous callables on ADK's worker threads.

With ``RunConfig.tool_thread_pool_config`` set, ADK runs a synchronous tool's callable
on a ThreadPoolExecutor of its own (``_get_tool_thread_pool``: live calls wherever
``HAS_TOOL_THREAD_POOL``, run_async calls too wherever
``RUN_ASYNC_USES_TOOL_THREAD_POOL``), through ``loop.run_in_executor``. A thread
cannot be cancelled: when the awaiting task is, the callable runs on. The plugin sees
each submission by wrapping ADK's pool getter (in every ADK module that holds it by
name) and, on each pool it returns, ``submit``: the same pool, the same callable, the
same future; only a note of the future, taken after it was queued. Where ADK has no
pool nothing is installed; a pool that cannot be wrapped is left alone (its calls
are not seen); a listener's failure never reaches ADK's call.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from .. import semconv as _sc
from .probes import HAS_TOOL_THREAD_POOL, POOL_GETTER

logger = logging.getLogger(_sc.LOGGER_NAME)

_GETTER_NAME = "_get_tool_thread_pool"
#: The listeners, weakly: a tuple, so that a submission reads it without a lock or a
#: copy (WeakSet iteration costs more than the rest of the hook).
class ThreadWorkListener(Protocol):
    """What hears the tool thread pool's submissions (a TaskTelemetryPlugin)."""

    def thread_work_queued(self, work: Any) -> None: ...


_pool_listeners: tuple[weakref.ref[Any], ...] = ()
#: Pools seen, each with its submissions not done yet (the saturation gauges).
_pools: weakref.WeakKeyDictionary[Any, _PoolSubmit] = weakref.WeakKeyDictionary()
_getter_hook: Callable[..., Any] | None = None
#: Installs and restores of the pool hook: a listener's death (a weakref callback) may
#: restore it from whichever thread dropped it.
_hook_lock = threading.RLock()


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
                    listener.thread_work_queued(work)
        except Exception:  # never break ADK's call
            logger.debug("thread work listener failed", exc_info=True)
        return work


def add_thread_work_listener(listener: ThreadWorkListener) -> None:
    """Calls ``listener.thread_work_queued(future)`` for each callable ADK submits to its
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
    original = POOL_GETTER
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
    if hook is not None and POOL_GETTER is not None:
        _swap_getter(hook, POOL_GETTER)
    for pool, submit in list(_pools.items()):
        with contextlib.suppress(Exception):
            if vars(pool).get("submit") is submit:
                del pool.submit
    _pools.clear()


#: The ADK modules that hold the pool getter by name (it is imported from module to
#: module: three where RUN_ASYNC_USES_TOOL_THREAD_POOL), found once per process by the
#: first install; each install and restore after it touches only them, however many
#: modules the process loads.
_getter_holders: list[Any] | None = None


def _swap_getter(old: Any, new: Any) -> None:
    global _getter_holders
    if _getter_holders is None:
        # ADK's modules that import the getter are imported with the one that
        # defines it (and by the probe in probes.py): all of them are in by now.
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
