"""The scripted agent the zero-code tests run: one model turn with parallel tool calls.

Shared by ``app_script.py`` (run under ``opentelemetry-instrument python``) and the
agents folder that ``adk api_server`` loads. No network, no key.
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent

from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

#: The function-call ids of the one parallel turn (each run replays it).
CALL_IDS = ("call-a", "call-b", "call-c")


async def lookup(city: str) -> dict[str, str]:
    """Looks a city up (scripted: a short sleep)."""
    await asyncio.sleep(0.02)
    return {"city": city, "weather": "sunny"}


def build_agent(name: str = "parallel_agent") -> LlmAgent:
    turn = [call("lookup", cid, city=city)
            for cid, city in zip(CALL_IDS, ("Paris", "Oslo", "Lima"), strict=True)]
    # Every run: the parallel calls, then a final answer (and again for the next run).
    model = ScriptedLlm([turn, [text("sunny everywhere")]], repeat=True)
    return LlmAgent(name=name, model=model, tools=[lookup], instruction="Answer with the weather.")
