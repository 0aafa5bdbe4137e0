"""A web app that builds a Runner per request, under uvicorn (test_close_flush).

``python close_flush_server.py PORT ENDPOINT``: an ASGI app served by
``uvicorn.Server(...).run()`` in the main thread, as ``adk api_server`` runs ADK's. Its
lifespan's startup calls configure_telemetry() (OTLP/HTTP to ENDPOINT, batch delays
and a metric interval that never pass): uvicorn has installed its SIGTERM handler by
then, so ours is chained in front of it, and uvicorn restores its own saved one
(``SIG_DFL``) before it re-raises SIGTERM after its graceful shutdown. ``GET /run``
makes a Runner on the shared App (with the plugin), runs one turn with ``CALLS``
parallel tool calls, closes the Runner (which closes the plugin: the close flush) and
answers what the export has sent so far. ``GET /handler`` names the SIGTERM handler.

The coalescing interval is ``INTERVAL_S`` (a minute): a close that comes after the
first one's collection leaves metrics to a deferred collection that, on its own, would
come long after the test has sent SIGTERM. Nothing else (no atexit: the process dies
by the re-raised signal; no lifespan close: each request closed its own Runner) sends
them: only our handler's running that deferral does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

INTERVAL_S = 60.0
CALLS = 2
FAR_AWAY = {"OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_BLRP_SCHEDULE_DELAY": "600000",
            "OTEL_METRIC_EXPORT_INTERVAL": "600000"}

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def make_app(endpoint: str) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    state: dict[str, Any] = {}

    def startup() -> None:
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.sessions import InMemorySessionService

        from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
        from adk_task_telemetry.scenarios import ScriptedLlm, call, text

        state["handle"] = configure_telemetry(service_name="close-flush-server",
                                              endpoint=endpoint, protocol="http/protobuf")

        async def fetch(item: int) -> dict[str, int]:
            """Fetches one item."""
            await asyncio.sleep(0)
            return {"item": item}

        # Every run the same turn: CALLS parallel calls, then an answer.
        state["model_turns"] = lambda: [
            [call("fetch", f"c{i}", item=i) for i in range(CALLS)], [text("done")]]
        state["tools"] = [fetch]
        state["plugin"] = TaskTelemetryPlugin()
        state["sessions"] = InMemorySessionService()
        state["App"], state["LlmAgent"], state["ScriptedLlm"] = App, LlmAgent, ScriptedLlm

    async def one_request() -> dict[str, Any]:
        from google.adk.runners import Runner
        from google.genai import types

        agent = state["LlmAgent"](name="fetcher", model=state["ScriptedLlm"](
            state["model_turns"]()), instruction="scripted", tools=state["tools"])
        app = state["App"](name="per_request", root_agent=agent, plugins=[state["plugin"]])
        runner = Runner(app=app, session_service=state["sessions"])
        try:
            session = await state["sessions"].create_session(app_name="per_request",
                                                             user_id="u")
            msg = types.Content(role="user", parts=[types.Part(text="go")])
            async for _event in runner.run_async(user_id="u", session_id=session.id,
                                                 new_message=msg):
                pass
        finally:
            await runner.close()
        return {"metrics_sent": state["handle"].export_status()["metrics"].sent}

    async def respond(send: Send, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    startup()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif scope["type"] == "http":
            if scope["path"] == "/run":
                await respond(send, await one_request())
            else:
                handler = signal.getsignal(signal.SIGTERM)
                await respond(send, {"module": getattr(handler, "__module__", None)})

    return app


def main(port: int, endpoint: str) -> None:
    import uvicorn

    from adk_task_telemetry.testing import close_metrics_every

    os.environ.update(FAR_AWAY)
    with close_metrics_every(INTERVAL_S):
        uvicorn.Server(uvicorn.Config(make_app(endpoint), host="127.0.0.1", port=port,
                                      log_level="warning", lifespan="on",
                                      interface="asgi3")).run()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
