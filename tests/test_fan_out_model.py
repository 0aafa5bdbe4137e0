"""``FanOutLlm``, the benchmarks' load model (adk_task_telemetry.testing, section
``server``), through a real ADK Runner: one instance shared by concurrent runs gives
each run its own parallel calls, with call ids unique across runs, and then answers
"done". The server benchmark and the curve benchmark count on exactly that; a model
that kept its turn in a counter would answer one run with another's turn."""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import ToolContext
from google.genai import types

from adk_task_telemetry.testing import FanOutLlm

CALLS = 3
RUNS = 4


async def test_concurrent_runs_each_get_their_own_calls_then_done() -> None:
    started: list[tuple[str, int]] = []  # (session, item) of every tool body

    async def fetch(item: int, tool_context: ToolContext) -> dict[str, int]:
        """Fetches one item."""
        started.append((tool_context.session.id, item))
        await asyncio.sleep(0)  # let the other runs' turns interleave with this one's
        return {"item": item}

    service = InMemorySessionService()
    runner = Runner(app=App(name="fan", root_agent=LlmAgent(
        name="worker", model=FanOutLlm("fetch", CALLS), instruction="x", tools=[fetch])),
        session_service=service)

    async def one(n: int) -> list[types.Content]:
        session = await service.create_session(app_name="fan", user_id="u",
                                               session_id=f"s{n}")
        msg = types.Content(role="user", parts=[types.Part(text="go")])
        return [e.content async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message=msg) if e.content is not None]

    try:
        outputs = await asyncio.gather(*(one(n) for n in range(RUNS)))
    finally:
        await runner.close()

    ids: list[str] = []
    for n, contents in enumerate(outputs):
        calls = [p.function_call for c in contents for p in c.parts or []
                 if p.function_call is not None]
        assert sorted((c.name, (c.args or {})["item"]) for c in calls) == [
            ("fetch", i) for i in range(CALLS)]
        ids += [c.id or "" for c in calls]
        assert sorted(i for s, i in started if s == f"s{n}") == list(range(CALLS))
        last = contents[-1].parts or []
        assert [p.text for p in last] == ["done"]
    assert len(set(ids)) == CALLS * RUNS  # unique across the runs sharing the model
