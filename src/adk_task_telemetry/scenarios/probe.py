"""The tools' own ground truth: what their bodies did, recorded by the bodies themselves.

One recorder for everything that runs scripted tools (the scenario library that
``demo`` and ``audit`` run, the tests, the randomized lifecycle generator): a tool
body calls :meth:`Probe.enter` (or wraps itself in :meth:`Probe.body`), and the probe
keeps the asyncio task that runs it, when that task ended and how the body ended.
Nothing here asks the plugin, so what the plugin reports can be judged against it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.thread
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.adk.tools.tool_context import ToolContext

from .. import adk_compat as compat
from .model import RUN_TAG


@dataclass
class TaskTruth:
    """One tool body, as the tool itself saw it."""

    call_id: str
    tool: str
    task: asyncio.Task[Any]
    started_ns: int
    ended_ns: int | None = None  # the task's done-callback (so after it really ended)
    body: str = "running"  # how the body ended: ok, error, cancelled
    recovered: bool = False
    #: The body raised CancelledError by itself (nothing cancelled its task).
    self_cancelled: bool = False

    @property
    def outcome(self) -> str:
        """How the task ended, in the contract's words."""
        if self.task.cancelled() or self.body == "cancelled":
            return "cancelled"
        if self.body == "error":
            return "recovered" if self.recovered else "error"
        if not self.task.cancelled() and self.task.exception() is not None:
            return "error"
        return "ok"


class Probe:
    """What the tools did: filled in by their bodies, never by the plugin.

    ``tasks`` maps each call id to the task running its body (the last one, where a
    model gave two calls one id; for a body on a pool thread, the pool's own future of
    that call, wrapped for the loop); ``records`` keeps every body entered through
    :meth:`enter`, one :class:`TaskTruth` each, duplicates included.
    """

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Future[Any]] = {}
        #: Every body entered with ``enter()``, in order (a duplicate id's too).
        self.records: list[TaskTruth] = []
        #: Tasks the bodies started and left running (fire-and-forget work).
        self.spawned: list[asyncio.Task[Any]] = []
        # A thread body's own executor future: done the moment its callable returned,
        # before the loop hears of it through the wrapper in ``tasks``.
        self.works: dict[str, concurrent.futures.Future[Any]] = {}
        self.threads: dict[str, int] = {}  # call id -> ident of the pool thread running it
        # The app ADK ran each call's invocation under (a nested AgentTool run's
        # differs on old ADK).
        self.app_names: dict[str, str] = {}
        self._started: dict[str, asyncio.Event] = {}
        self._tagged: dict[str, asyncio.Event] = {}
        #: Set by a body that waits for its run's end (a caller may act on it).
        self.blocked = asyncio.Event()
        # Set by cleanup(): tools that ignore cancellation check it to stop.
        self.stopping = False
        # Set by cleanup() too: synchronous tools block on it (a thread cannot be
        # cancelled; this ends their blocking work early).
        self.stop = threading.Event()
        #: Moments (time.monotonic()) a scenario or tool notes, by name.
        self.times: dict[str, float] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):  # made outside the loop: found on enter
            self.loop = asyncio.get_running_loop()

    def enter(self, tool_context: ToolContext, tool: str = "") -> TaskTruth | None:
        """Called first thing in a tool body that runs on the event loop. Returns the
        body's record (None where no asyncio task runs the body)."""
        call_id = tool_context.function_call_id or ""
        task = asyncio.current_task()
        record: TaskTruth | None = None
        if task is not None:
            self.tasks[call_id] = task
            self.loop = task.get_loop()
            record = TaskTruth(str(call_id), tool, task, time.time_ns())
            self.records.append(record)
            task.add_done_callback(_ended_now(record))
        app = getattr(compat.invocation_context_of(tool_context), "app_name", None)
        if isinstance(app, str):
            self.app_names[call_id] = app
        self._event(call_id).set()
        self.began_under(RUN_TAG.get()).set()
        return record

    @contextlib.contextmanager
    def body(self, tool_context: ToolContext, tool: str) -> Iterator[TaskTruth]:
        """``with probe.body(tool_context, "name") as record:`` around a tool body: enters
        it, and records how the body ended (ok, error, or cancelled, a streaming
        tool's close included)."""
        record = self.enter(tool_context, tool)
        assert record is not None, "a tool body on the event loop runs in a task"
        try:
            yield record
        except asyncio.CancelledError:
            record.body = "cancelled"
            raise
        except Exception:
            record.body = "error"
            raise
        except BaseException:  # GeneratorExit of a streaming tool that is closed
            record.body = "cancelled"
            raise
        record.body = "ok"

    def enter_thread(self, tool_context: ToolContext) -> None:
        """``enter`` for a synchronous body that ADK runs on a pool thread. Its truth
        is the ThreadPoolExecutor's future of this very call (done once the callable
        has returned), taken from the work item that runs this frame."""
        call_id = tool_context.function_call_id or ""
        work = _pool_future()
        loop = self.loop
        if work is None or loop is None:  # this ADK runs it on the event loop after all
            self.enter(tool_context)
            return
        app = getattr(compat.invocation_context_of(tool_context), "app_name", None)
        self.threads[call_id] = threading.get_ident()

        def entered() -> None:
            self.works[call_id] = work
            self.tasks[call_id] = asyncio.wrap_future(work, loop=loop)
            if isinstance(app, str):
                self.app_names[call_id] = app
            self._event(call_id).set()

        loop.call_soon_threadsafe(entered)

    def _event(self, call_id: str) -> asyncio.Event:
        return self._started.setdefault(call_id, asyncio.Event())

    def began_under(self, tag: str) -> asyncio.Event:
        """Set once a body has begun under this ``RUN_TAG`` (the run a scenario tagged)."""
        return self._tagged.setdefault(tag, asyncio.Event())

    def mark_recovered(self, call_id: str) -> None:
        """An error callback answered for this call's error (the body raised)."""
        for record in self.records:
            if record.call_id == call_id and record.body == "error":
                record.recovered = True

    async def wait_started(self, *call_ids: str, timeout: float = 15.0) -> None:
        waits = [self._event(cid).wait() for cid in call_ids]
        await asyncio.wait_for(asyncio.gather(*waits), timeout)

    async def wait_blocked(self, call_id: str, timeout: float = 15.0) -> None:
        """Until the thread body of ``call_id`` blocks on ``stop`` (its stack says so)."""
        await self.wait_started(call_id, timeout=timeout)
        ident = self.threads[call_id]

        async def blocked() -> None:
            while getattr(sys._current_frames().get(ident), "f_code", None) is not _WAITING:
                await asyncio.sleep(0.005)
        await asyncio.wait_for(blocked(), timeout)

    async def wait_finished(self, *call_ids: str, timeout: float = 15.0) -> None:
        await self.wait_started(*call_ids, timeout=timeout)
        await asyncio.wait([self.tasks[c] for c in call_ids], timeout=timeout)
        await asyncio.sleep(0)

    def pending(self) -> list[str]:
        """Call ids whose body is still running (a thread body: its callable has not
        returned, whatever the loop has heard yet)."""
        return [cid for cid, t in self.tasks.items()
                if not self.works.get(cid, t).done()]

    def running(self) -> list[TaskTruth]:
        """The records of bodies whose task is still running (one per task)."""
        return [r for r in self.records if not r.task.done()]

    def own_tasks(self) -> set[asyncio.Future[Any]]:
        """Every task (or thread body's future) the tools ran or spawned."""
        return {*self.tasks.values(), *(r.task for r in self.records), *self.spawned}

    async def cleanup(self) -> None:
        """Cancels every body task still running (orphans and spawned work included),
        stops blocking thread bodies, and waits."""
        self.stopping = True
        self.stop.set()
        left = [t for t in self.own_tasks() if not t.done()]
        for t in left:
            if isinstance(t, asyncio.Task):  # a thread's future: it ends when it returns
                t.cancel()
        if left:
            await asyncio.wait(left, timeout=5.0)
        for _ in range(3):
            await asyncio.sleep(0)


def _ended_now(record: TaskTruth) -> Callable[[asyncio.Future[Any]], None]:
    """The done-callback that notes when ``record``'s task ended."""
    def ended(_task: asyncio.Future[Any]) -> None:
        record.ended_ns = time.time_ns()
    return ended


#: Where a thread blocked in ``threading.Event.wait`` is, innermost.
_WAITING = threading.Condition.wait.__code__


def _pool_future() -> concurrent.futures.Future[Any] | None:
    """The future of the ThreadPoolExecutor call that runs the caller, if one does."""
    run = getattr(getattr(concurrent.futures.thread, "_WorkItem", None), "run", None)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is getattr(run, "__code__", None):
            work = getattr(frame.f_locals.get("self"), "future", None)
            return work if isinstance(work, concurrent.futures.Future) else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


__all__ = ["Probe", "TaskTruth"]
