"""A task of an unsampled trace offers its ``duration`` point no span as exemplar.

docs/telemetry.md: the ``duration`` exemplar is the task's span. In an unsampled trace
there is none, so the point must not point at another span either (ADK's
``execute_tool`` span is current in the task's done-callback). Seen with an exemplar
filter that keeps every measurement (``AlwaysOnExemplarFilter``), where the
reservoir records the ids of whatever span the measurement's context holds. Through a
real Runner with a scripted model, in a process of its own (ADK traces with the
global TracerProvider, which a process sets once).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CALLS = 3


def test_an_unsampled_task_offers_no_span_as_exemplar() -> None:
    out = subprocess.run([sys.executable, "-m", "tests.test_unsampled_exemplar"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["count"] == CALLS  # every task measured, unsampled or not
    assert found["exemplars"], "the always-on exemplar filter kept no exemplar"
    assert all(span_id is None for span_id in found["exemplars"]), found


async def _run() -> None:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry import TaskTelemetryPlugin
    from adk_task_telemetry.scenarios.model import ScriptedLlm, call, text

    async def fetch(item: int) -> dict[str, int]:
        """Fetches one item."""
        await asyncio.sleep(0)
        return {"item": item}

    model = ScriptedLlm(turns=[[call("fetch", f"call-{i}", item=i) for i in range(CALLS)],
                               [text("done")]])
    agent = LlmAgent(name="worker", model=model, instruction="scripted", tools=[fetch])
    runner = Runner(app=App(name="unsampled", root_agent=agent,
                            plugins=[TaskTelemetryPlugin()]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="unsampled", user_id="u")
    async for _event in runner.run_async(
            user_id="u", session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text="go")])):
        pass
    # Not closed: a close collects the metrics, and a collection hands the exemplars
    # out once (the reader's own collection below would see none).


def main() -> None:
    import logging

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    from adk_task_telemetry import semconv as sc

    logging.getLogger("google_adk").setLevel(logging.ERROR)
    trace.set_tracer_provider(TracerProvider(sampler=ParentBased(ALWAYS_OFF)))
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader],
                                             exemplar_filter=AlwaysOnExemplarFilter()))
    asyncio.run(_run())
    count, exemplars = 0, list[int | None]()
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if sm.scope.name == sc.SCOPE_NAME and m.name == sc.METRIC_DURATION:
                    for p in m.data.data_points:
                        count += getattr(p, "count", 0)  # a histogram's points
                        exemplars.extend(e.span_id for e in p.exemplars)
    print(json.dumps({"count": count, "exemplars": exemplars}))


if __name__ == "__main__":
    main()
