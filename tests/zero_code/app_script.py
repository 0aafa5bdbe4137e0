"""Run by the zero-code tests as ``opentelemetry-instrument python app_script.py MODE``.

No line here mentions telemetry set-up: the instrumentor must add the plugin.
MODE ``plain``: an App without TaskTelemetryPlugin; ``listed``: an App that lists one;
``seed_bug``: the scenario library's live seed bug. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from tests.zero_code.scripted import build_agent


async def seed_bug() -> dict[str, object]:
    """The scenario the project exists for (ADK issue 7058), with no plugin listed."""
    from adk_task_telemetry.scenarios import run_scenario

    run = await run_scenario("seed_bug", [])
    still_running = sorted(run.probe.pending())
    await run.probe.cleanup()
    return {"still_running": still_running}


async def main(mode: str) -> dict[str, object]:
    if mode == "seed_bug":
        return await seed_bug()
    plugins = []
    if mode == "listed":
        from adk_task_telemetry import TaskTelemetryPlugin

        plugins = [TaskTelemetryPlugin()]
    app = App(name="zero_code_app", root_agent=build_agent(), plugins=plugins)
    runner = Runner(app=app, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name=app.name, user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="weather?")])
    events = 0
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        events += 1
    await runner.close()
    return {"plugins": [type(p).__name__ for p in runner.plugin_manager.plugins],
            "plugin_ids": [id(p) for p in runner.plugin_manager.plugins],
            "events": events}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))), flush=True)
