"""The tools the scenarios use, each recording the asyncio task that runs its body in a
:class:`Probe` (so that a caller can check that an orphan the plugin reports is still
running), and the scripted agents that call them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .model import ScriptedLlm
from .probe import Probe


def scenario_tools(probe: Probe) -> dict[str, Callable[..., Any]]:
    """The scenarios' tools by name, each recording its body in ``probe``: for a test
    that scripts a scenario of its own (``scripted_agent`` and ``Harness``)."""
    async def lookup_order(order_id: str, tool_context: ToolContext) -> dict[str, str]:
        """Looks up an order."""
        probe.enter(tool_context)
        await asyncio.sleep(0.01)
        return {"order_id": order_id, "status": "shipped"}

    def add_numbers(a: int, b: int, tool_context: ToolContext) -> dict[str, int]:
        """Adds two numbers (a sync tool)."""
        probe.enter(tool_context)
        return {"sum": a + b}

    async def slow_search(query: str, tool_context: ToolContext) -> dict[str, str]:
        """Searches slowly."""
        probe.enter(tool_context)
        await asyncio.sleep(30)
        return {"query": query}

    async def wait_briefly(tool_context: ToolContext) -> dict[str, str]:
        """Waits a moment (outlasts a nested agent run beside it)."""
        probe.enter(tool_context)
        await asyncio.sleep(0.2)
        return {"waited": "0.2s"}

    async def flaky_api(tool_context: ToolContext) -> dict[str, str]:
        """Fails after a moment."""
        probe.enter(tool_context)
        await asyncio.sleep(0.05)
        raise ConnectionError("upstream refused the connection")

    async def monitor_stock(symbol: str, tool_context: ToolContext) -> AsyncGenerator[str, None]:
        """Streams price changes of a stock symbol (a live streaming tool)."""
        probe.enter(tool_context)
        while True:
            await asyncio.sleep(0.05)
            yield f"{symbol}: no change"

    async def stubborn_feed(tool_context: ToolContext) -> AsyncGenerator[str, None]:
        """Streams ticks and ignores cancellation (an application bug)."""
        probe.enter(tool_context)
        while not probe.stopping:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
            yield "tick"

    async def start_upload(file: str, tool_context: ToolContext) -> dict[str, str]:
        """Starts an upload in a fire-and-forget task and returns at once."""
        probe.enter(tool_context)

        async def upload() -> None:
            await asyncio.sleep(30)

        probe.tasks[f"{tool_context.function_call_id}/upload"] = asyncio.create_task(upload())
        return {"upload": file, "status": "started"}

    async def fetch_page(url: str, tool_context: ToolContext) -> dict[str, str]:
        """Fetches a page, opening a span it forgets to end (an application bug)."""
        probe.enter(tool_context)
        from opentelemetry import trace

        trace.get_tracer("scenarios.http").start_span(f"GET {url}")
        return {"url": url, "status": "200"}

    def stop_streaming(function_name: str) -> None:
        """Stops a running streaming tool."""
        return None

    async def send_report(topic: str, tool_context: ToolContext) -> dict[str, str]:
        """Sends a report in the background (a live non-blocking tool)."""
        probe.enter(tool_context)
        await asyncio.sleep(0.05)
        return {"topic": topic, "status": "sent"}

    def crunch_numbers(seconds: float, tool_context: ToolContext) -> dict[str, str]:
        """Crunches numbers (a synchronous tool: it blocks its thread for ``seconds``)."""
        probe.enter_thread(tool_context)
        # The blocking work (cleanup() ends it early).
        probe.stop.wait(seconds)
        probe.times[f"{tool_context.function_call_id}/returned"] = time.monotonic()
        return {"status": "crunched"}

    def open_ticket(issue: str, tool_context: ToolContext) -> dict[str, str]:
        """Opens a ticket that a human resolves later (a long-running tool)."""
        probe.enter(tool_context)
        return {"ticket": "T-1", "status": "pending"}

    return {f.__name__: f for f in (
        lookup_order, add_numbers, slow_search, wait_briefly, flaky_api, monitor_stock,
        stop_streaming, send_report, open_ticket, stubborn_feed, start_upload, fetch_page,
        crunch_numbers)}


def scripted_agent(name: str, turns: Sequence[Sequence[types.Part]], tools: Sequence[Any],
                   **kw: Any) -> LlmAgent:
    """An LlmAgent whose model replays ``turns`` (a :class:`ScriptedLlm`)."""
    return LlmAgent(name=name, model=ScriptedLlm(turns=turns), instruction="scripted",
                    tools=list(tools), **kw)


def live_agent(name: str, tools: Sequence[Any]) -> tuple[LlmAgent, ScriptedLlm]:
    """An agent for run_live, and its model (whose say_live() scripts the session)."""
    model = ScriptedLlm()
    return LlmAgent(name=name, model=model, instruction="scripted", tools=list(tools)), model

