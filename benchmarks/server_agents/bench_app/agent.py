"""The agent ADK's server loads in benchmarks/bench_server.py (agents folder layout).

What a user writes in agent.py, in one of four arms chosen by ``BENCH_SERVER_ARM``:
``bare`` (no plugin, no export: ADK's server as it comes), ``plugin`` (the plugin,
no configure_telemetry()), ``export`` (configure_telemetry() to the OTLP/gRPC
endpoint in ``BENCH_SERVER_ENDPOINT``, and the plugin registered first) and
``export_only`` (configure_telemetry() without the plugin: what exporting ADK's own
telemetry costs). The model
is scripted (no network, no key) and CPU-bound work is the tools': every run makes
``BENCH_SERVER_CALLS`` parallel calls of ``crunch``, a synchronous tool that runs
``BENCH_SERVER_WORK`` rounds of integer arithmetic (deterministic: the same work for
every call, whichever arm), then the model answers "done".
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry.scenarios.model import call, text

ARM = os.environ.get("BENCH_SERVER_ARM", "bare")
CALLS = int(os.environ.get("BENCH_SERVER_CALLS", "2"))
WORK = int(os.environ.get("BENCH_SERVER_WORK", "20000"))

TELEMETRY: Any = None
if ARM in ("export", "export_only"):
    TELEMETRY = configure_telemetry("bench-server",
                                    endpoint=os.environ["BENCH_SERVER_ENDPOINT"],
                                    protocol="grpc")


def crunch(seed: int) -> dict[str, int]:
    """Computes a checksum (CPU-bound: a fixed number of rounds, no I/O)."""
    h = seed
    for _ in range(WORK):
        h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    return {"checksum": h}


_ids = itertools.count()


class CrunchLlm(BaseLlm):
    """Calls ``crunch`` CALLS times in a run's first turn (unique call ids) and
    answers "done" once the responses are back."""

    model: str = "crunch"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        answered = last is not None and any(
            p.function_response is not None for p in (last.parts or []))
        parts = ([text("done")] if answered else
                 [call("crunch", f"crunch-{next(_ids)}", seed=i) for i in range(CALLS)])
        yield LlmResponse(content=types.Content(role="model", parts=parts))


root_agent = LlmAgent(name="cruncher", model=CrunchLlm(), instruction="scripted",
                      tools=[crunch])
PLUGIN = TaskTelemetryPlugin() if ARM in ("plugin", "export") else None
app = App(name="bench_app", root_agent=root_agent,
          plugins=[PLUGIN] if PLUGIN is not None else [])
