"""A web app that builds a Runner per request, under uvicorn (test_close_flush).

``python close_flush_server.py 0 ENDPOINT N``: no server, N such requests in a row,
then the process returns from main: only the exit list (atexit) can send what the
last closes deferred.

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


class PerRequest:
    """The shared parts (configure_telemetry()'s handle, the plugin, the sessions) and
    one request's work: a Runner made, run and closed."""

    def __init__(self, endpoint: str) -> None:
        from google.adk.sessions import InMemorySessionService

        from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry

        self.handle = configure_telemetry(service_name="close-flush-server",
                                          endpoint=endpoint, protocol="http/protobuf")
        self.plugin = TaskTelemetryPlugin()
        self.sessions = InMemorySessionService()

    async def request(self) -> dict[str, Any]:
        """One run with ``CALLS`` parallel calls through a Runner of its own; answers
        the metric batches the export has sent after the Runner's close."""
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.runners import Runner
        from google.genai import types

        from adk_task_telemetry.scenarios import ScriptedLlm, call, text

        async def fetch(item: int) -> dict[str, int]:
            """Fetches one item."""
            await asyncio.sleep(0)
            return {"item": item}

        model = ScriptedLlm([[call("fetch", f"c{i}", item=i) for i in range(CALLS)],
                             [text("done")]])
        agent = LlmAgent(name="fetcher", model=model, instruction="scripted", tools=[fetch])
        app = App(name="per_request", root_agent=agent, plugins=[self.plugin])
        runner = Runner(app=app, session_service=self.sessions)
        try:
            session = await self.sessions.create_session(app_name="per_request", user_id="u")
            msg = types.Content(role="user", parts=[types.Part(text="go")])
            async for _event in runner.run_async(user_id="u", session_id=session.id,
                                                 new_message=msg):
                pass
        finally:
            await runner.close()
        return {"metrics_sent": self.handle.export_status()["metrics"].sent}


def make_app(endpoint: str) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    state: dict[str, PerRequest] = {}

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
                    state["app"] = PerRequest(endpoint)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif scope["type"] == "http":
            if scope["path"] == "/run":
                await respond(send, await state["app"].request())
            else:
                handler = signal.getsignal(signal.SIGTERM)
                await respond(send, {"module": getattr(handler, "__module__", None)})

    return app


async def _requests(endpoint: str, n: int) -> list[int]:
    app = PerRequest(endpoint)
    return [(await app.request())["metrics_sent"] for _ in range(n)]


def main(port: int, endpoint: str) -> None:
    import uvicorn

    from adk_task_telemetry.testing import close_metrics_every

    os.environ.update(FAR_AWAY)
    if port == 0:  # no server: N requests, then the interpreter's exit (atexit)
        with close_metrics_every(INTERVAL_S):
            sent = asyncio.run(_requests(endpoint, int(sys.argv[3])))
        print("RESULT " + json.dumps({"metrics_sent": sent}), flush=True)
        return
    with close_metrics_every(INTERVAL_S):
        uvicorn.Server(uvicorn.Config(make_app(endpoint), host="127.0.0.1", port=port,
                                      log_level="warning", lifespan="on",
                                      interface="asgi3")).run()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
