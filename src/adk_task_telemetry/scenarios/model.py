"""A scripted model: a BaseLlm that replays canned responses. No network, no key."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr


def call(name: str, call_id: str, **args: Any) -> types.Part:
    """A function-call part, as a model would send it."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))


def text(value: str) -> types.Part:
    return types.Part(text=value)


def _response(parts: Sequence[types.Part], **kw: Any) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=list(parts)), **kw)


class ScriptedLlm(BaseLlm):
    """Replays ``turns`` one per model call; then answers "done" (or, with
    ``repeat``, starts over: the same turns for every run).

    For live runs, ``say_live()`` queues a response on the live connection; the
    connection stays open, as a real one does, until it is closed. Its ``receive()``
    then ends at its next response; with ``live_ends_on_close`` at once, as a real
    one's does (ADK closes it when the caller closes the live request queue).
    ``live_connection``: a subclass of :class:`ScriptedLiveConnection` to use instead
    (e.g. one whose ``receive()`` fails once closed, as google-genai's does).
    """

    model: str = "scripted"
    _turns: list[list[types.Part]] = PrivateAttr(default_factory=list)
    _calls: int = PrivateAttr(default=0)
    _repeat: bool = PrivateAttr(default=False)
    _live: asyncio.Queue[LlmResponse] | None = PrivateAttr(default=None)
    _received: list[types.Content] = PrivateAttr(default_factory=list)
    _ends_on_close: bool = PrivateAttr(default=False)
    _connection: type[ScriptedLiveConnection] = PrivateAttr()

    def __init__(self, turns: Sequence[Sequence[types.Part]] = (), *, repeat: bool = False,
                 live_ends_on_close: bool = False,
                 live_connection: type[ScriptedLiveConnection] | None = None,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._turns = [list(t) for t in turns]
        self._repeat = repeat
        self._ends_on_close = live_ends_on_close
        self._connection = live_connection or ScriptedLiveConnection

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        i = self._calls
        self._calls += 1
        if self._repeat and self._turns:
            i %= len(self._turns)
        parts = self._turns[i] if i < len(self._turns) else [text("done")]
        yield _response(parts)

    def _queue(self) -> asyncio.Queue[LlmResponse]:
        if self._live is None:
            self._live = asyncio.Queue()
        return self._live

    def say_live(self, *parts: types.Part, turn_complete: bool = True) -> None:
        self._queue().put_nowait(_response(parts, turn_complete=turn_complete))

    @asynccontextmanager
    async def connect(self, llm_request: LlmRequest) -> AsyncIterator[BaseLlmConnection]:  # type: ignore[override]
        conn = self._connection(self._queue(), self._received,
                                ends_on_close=self._ends_on_close)
        try:
            yield conn
        finally:
            await conn.close()


class FanOutLlm(BaseLlm):
    """A run's first model call asks for ``calls`` parallel calls of ``tool`` (unique
    call ids, the argument ``arg`` set to 0, 1, ...); once their responses are back it
    answers "done". Which turn it is comes from the request itself (its last content
    holds function responses or not), never from a count of calls, so one instance
    serves any number of concurrent runs and sessions: the benchmarks' load shape (a
    server's agent, many runs held open)."""

    model: str = "fan-out"
    _tool: str = PrivateAttr()
    _calls: int = PrivateAttr()
    _arg: str = PrivateAttr()
    _ids: Iterator[int] = PrivateAttr(default_factory=itertools.count)

    def __init__(self, tool: str, calls: int, *, arg: str = "item", **kw: Any) -> None:
        super().__init__(**kw)
        self._tool, self._calls, self._arg = tool, calls, arg

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        answered = last is not None and any(
            p.function_response is not None for p in (last.parts or []))
        yield _response([text("done")] if answered else [
            call(self._tool, f"{self._tool}-{next(self._ids)}", **{self._arg: i})
            for i in range(self._calls)])


#: Which run of a scenario the code running now belongs to (set by the scenario in
#: the task consuming each run; ADK's tasks inherit it).
RUN_TAG: contextvars.ContextVar[str] = contextvars.ContextVar("scenario_run_tag", default="")

Turn = Callable[[], Awaitable[Sequence[types.Part]]]


class PerRunLlm(BaseLlm):
    """Replays turns per run (by ``RUN_TAG``), each turn a coroutine that may wait for
    something the scenario sets: two runs of one session can then be scripted exactly,
    however ADK names their invocations."""

    model: str = "scripted-per-run"
    _turns: dict[str, list[Turn]] = PrivateAttr(default_factory=dict)
    _next: dict[str, int] = PrivateAttr(default_factory=dict)

    def __init__(self, turns: dict[str, list[Turn]], **kw: Any) -> None:
        super().__init__(**kw)
        self._turns = turns

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        tag = RUN_TAG.get()
        i = self._next.get(tag, 0)
        self._next[tag] = i + 1
        turns = self._turns.get(tag, [])
        parts = await turns[i]() if i < len(turns) else [text("done")]
        yield _response(parts)


class ScriptedLiveConnection(BaseLlmConnection):
    """The live connection of :class:`ScriptedLlm`: yields what ``say_live()`` queued.

    ``ends_on_close``: ``receive()`` ends as soon as ``close()`` is called (else at the
    next queued response after it)."""

    def __init__(self, queue: asyncio.Queue[LlmResponse], received: list[types.Content],
                 *, ends_on_close: bool = False) -> None:
        self._queue = queue
        self._received = received
        self._closed = False
        self._ends_on_close = ends_on_close
        self._wake = asyncio.Event()

    async def send_history(self, history: list[types.Content]) -> None:
        return None

    async def send_content(self, content: types.Content) -> None:
        self._received.append(content)

    async def send_realtime(self, blob: types.Blob) -> None:
        return None

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        if not self._ends_on_close:
            while not self._closed:
                yield await self._queue.get()
            return
        while not self._closed:
            get = asyncio.ensure_future(self._queue.get())
            wake = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait([get, wake], return_when=asyncio.FIRST_COMPLETED)
            finally:
                wake.cancel()
                if not get.done():
                    get.cancel()
            if get.done() and not get.cancelled():
                yield get.result()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
