"""The agent ADK's server loads in tests/test_adk_server.py (agents folder layout).

It is what a user writes in agent.py: configure_telemetry() (how is chosen by the
test through ``ATT_CONFIGURE``), then an ``App`` with the plugin registered first.
The model is scripted (no network, no key) and answers commands in the user text:
``parallel <tag>`` (three parallel calls), ``slow <tag>`` (one call that sleeps),
``fail <tag>`` (two parallel calls, one raises), ``stubborn <tag>`` (one call that
ignores its first cancellation for a while), and, live, ``seed <tag>`` (two calls
to one streaming tool: ADK issue 7058) and ``linger <tag>`` (a streaming tool that
goes on for a while when cancelled: an orphan on every version). ``SERVED`` is
the tools' own record: the call id of every tool body that started.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry.scenarios.model import ScriptedLiveConnection, ScriptedLlm, call, text

_how = os.environ.get("ATT_CONFIGURE", "args")
if _how == "args":  # an explicit endpoint, as the docs' recipes do
    TELEMETRY = configure_telemetry("served-agent", endpoint=os.environ["ATT_ENDPOINT"],
                                    protocol=os.environ.get("ATT_PROTOCOL", "grpc"))
elif _how == "env":  # nothing but the OTEL_* variables the server was started with
    TELEMETRY = configure_telemetry()

SERVED: list[str] = []


def _served(tool_context: ToolContext) -> None:
    SERVED.append(str(tool_context.function_call_id))


def _response(*parts: types.Part) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=list(parts)),
                       turn_complete=True)


class CommandLlm(ScriptedLlm):
    """Answers the command in the last user text; "done" once tools have answered."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        words = next((p.text.split() for p in (last.parts or []) if p.text), []) \
            if last is not None and last.role == "user" else []
        if words[:1] == ["parallel"]:
            tag = words[1]
            yield _response(call("lookup_order", f"{tag}-1", order_id="A1"),
                            call("lookup_order", f"{tag}-2", order_id="B2"),
                            call("add_numbers", f"{tag}-3", a=1, b=2))
        elif words[:1] == ["slow"]:
            yield _response(call("slow_search", f"{words[1]}-slow", query="x"))
        elif words[:1] == ["fail"]:
            yield _response(call("lookup_order", f"{words[1]}-1", order_id="C3"),
                            call("flaky_lookup", f"{words[1]}-2", order_id="D4"))
        elif words[:1] == ["stubborn"]:
            yield _response(call("stubborn_search", f"{words[1]}-stubborn", query="x"))
        else:
            yield _response(text("done"))

    @asynccontextmanager
    async def connect(self, llm_request: LlmRequest) -> AsyncIterator[BaseLlmConnection]:  # type: ignore[override]
        conn = _SeedConnection(asyncio.Queue(), [])
        try:
            yield conn
        finally:
            await conn.close()


class _SeedConnection(ScriptedLiveConnection):
    async def send_content(self, content: types.Content) -> None:
        await super().send_content(content)
        for part in content.parts or []:
            if part.text and part.text.startswith("linger "):
                self._queue.put_nowait(_response(
                    call("linger_feed", f"{part.text.split()[1]}-linger")))
            if part.text and part.text.startswith("seed "):
                tag = part.text.split()[1]
                self._queue.put_nowait(_response(
                    call("monitor_stock", f"{tag}-goog", symbol="GOOG"),
                    call("monitor_stock", f"{tag}-msft", symbol="MSFT")))


async def lookup_order(order_id: str, tool_context: ToolContext) -> dict[str, str]:
    """Looks up an order."""
    _served(tool_context)
    await asyncio.sleep(0.05)
    return {"order_id": order_id, "status": "shipped"}


def add_numbers(a: int, b: int, tool_context: ToolContext) -> dict[str, int]:
    """Adds two numbers (a sync tool)."""
    _served(tool_context)
    return {"sum": a + b}


async def slow_search(query: str, tool_context: ToolContext) -> dict[str, str]:
    """Searches slowly (long enough for a client to leave mid-call)."""
    _served(tool_context)
    await asyncio.sleep(60)
    return {"query": query}


async def flaky_lookup(order_id: str, tool_context: ToolContext) -> dict[str, str]:
    """Looks up an order in a backend that fails."""
    _served(tool_context)
    await asyncio.sleep(0.02)
    raise ConnectionError(f"backend down for {order_id}")


async def stubborn_search(query: str, tool_context: ToolContext) -> dict[str, str]:
    """Searches slowly and finishes its work even when cancelled (an application bug)."""
    _served(tool_context)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(0.5)  # swallows the cancellation: outlives its run
    return {"query": query}


async def linger_feed(tool_context: ToolContext) -> AsyncGenerator[str, None]:
    """Streams ticks; cancelled, goes on for 2.5 s (an application bug)."""
    _served(tool_context)
    stop_at: float | None = None
    while stop_at is None or time.monotonic() < stop_at:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            stop_at = stop_at or time.monotonic() + 2.5
            continue
        yield "tick"


async def monitor_stock(symbol: str) -> AsyncGenerator[str, None]:
    """Streams price changes of a stock symbol (a live streaming tool)."""
    while True:
        await asyncio.sleep(0.05)
        yield f"{symbol}: no change"


root_agent = LlmAgent(name="clerk", model=CommandLlm(), instruction="scripted",
                      tools=[lookup_order, add_numbers, slow_search, monitor_stock,
                             flaky_lookup, stubborn_search, linger_feed])
PLUGIN = TaskTelemetryPlugin()  # registered first, as the docs say
app = App(name="telemetry_app", root_agent=root_agent, plugins=[PLUGIN])
