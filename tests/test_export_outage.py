"""A collector that stops and starts again on the same port loses nothing that fits the
buffer; past the bound the oldest are dropped, and exactly those are counted.

The pipeline is configure_telemetry()'s own, built detached (installed nowhere, so it
lives in this process); real ADK runs with the scripted model, a real OTLP receiver
over gRPC and HTTP. The oracle is the tool's own record of the calls it served, in
order; the plugin's count is ``handle.export_status()`` and the exported
``adk.export.dropped`` counter.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator

import pytest
from google.adk.tools.tool_context import ToolContext
from opentelemetry.sdk.trace import ReadableSpan

from adk_task_telemetry import TaskTelemetryPlugin
from adk_task_telemetry.configure import SignalStatus, TelemetryHandle, detached

from .otlp_receivers import (
    BlackHole,
    GrpcReceiver,
    HttpReceiver,
    Received,
    attrs,
    restarted,
)

PROTOCOLS = ["grpc", "http/protobuf"]
RECEIVERS: dict[str, Callable[[], GrpcReceiver | HttpReceiver]] = {
    "grpc": GrpcReceiver, "http/protobuf": HttpReceiver}


class Agent:
    """A Runner whose model makes ``calls`` calls per run, each with a call id of its
    own; the tool records every call it served, in the order it served them."""

    def __init__(self, plugin: TaskTelemetryPlugin, calls: int = 1) -> None:
        self.plugin, self.calls = plugin, calls
        self.served: list[str] = []
        self._runs = 0

    async def run(self, n: int) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.apps import App
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService
        from google.genai import types

        from adk_task_telemetry.scenarios import ScriptedLlm, call, text

        def lookup(order_id: str, tool_context: ToolContext) -> dict[str, str]:
            """Looks an order up."""
            self.served.append(str(tool_context.function_call_id))
            return {"order_id": order_id}

        for _ in range(n):
            self._runs += 1
            run = self._runs
            model = ScriptedLlm([[call("lookup", f"r{run}-c{i}", order_id=str(i))
                                  for i in range(self.calls)], [text("done")]])
            agent = LlmAgent(name="clerk", model=model, instruction="x", tools=[lookup])
            runner = Runner(app=App(name="outage", root_agent=agent, plugins=[self.plugin]),
                            session_service=InMemorySessionService())
            session = await runner.session_service.create_session(app_name="outage",
                                                                  user_id="u")
            msg = types.Content(role="user", parts=[types.Part(text="go")])
            async for _ in runner.run_async(user_id="u", session_id=session.id,
                                            new_message=msg):
                pass


def _received_calls(rx: Received) -> list[str]:
    return [str(attrs(s.attributes)["gen_ai.tool.call.id"]) for s in rx.tool_spans()]


def _until(predicate: Callable[[], bool], what: str, timeout: float = 60.0,
           seen: Callable[[], object] = lambda: None) -> None:
    """Waits for ``predicate``; on timeout the message says what ``seen`` saw last."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; saw {seen()}"
        time.sleep(0.05)


def _at_rest(handle: TelemetryHandle, within: Callable[[SignalStatus], bool]) -> SignalStatus:
    """The traces status once the buffer is ``within`` its bound again. A retry in
    flight comes on top of the bound until it fails and is trimmed (buffer.py); after
    the outage's runs nothing more arrives, so from then on what is held and what was
    dropped stay as they are."""
    last: list[SignalStatus] = []

    def settled() -> bool:
        last[:] = [handle.export_status()["traces"]]
        return last[0].failing and within(last[0])

    _until(settled, "the buffer back within its bound", seen=lambda: last)
    return last[0]


def _recovered(handle: TelemetryHandle, rx: Received, calls: int, held: SignalStatus) -> None:
    """Waits until the collector has the ``calls`` held and the sender knows it. An
    export that timed out on a loaded machine may have arrived all the same; it is
    tried again, and spans that end before that retry come on top of it: past the
    bound, the oldest of what was held would be dropped (and counted)."""
    _until(lambda: len(set(_received_calls(rx))) == calls
           and not handle.export_status()["traces"].failing, "what was held",
           seen=lambda: (held, len(set(_received_calls(rx))),
                         handle.export_status()["traces"]))


@pytest.fixture(params=PROTOCOLS)
def collector(request: pytest.FixtureRequest) -> Iterator[list[GrpcReceiver | HttpReceiver]]:
    """[the receiver now]; the test replaces it when it restarts it."""
    current = [RECEIVERS[request.param]()]
    yield current
    current[0].stop()


def _pipeline(rx: GrpcReceiver | HttpReceiver) -> tuple[TelemetryHandle, TaskTelemetryPlugin]:
    handle = detached(endpoint=rx.endpoint, protocol=rx.protocol, timeout=1.0)
    plugin = TaskTelemetryPlugin(tracer_provider=handle.tracer_provider,
                                 meter_provider=handle.meter_provider)
    return handle, plugin


def _outage(handle: TelemetryHandle, collector: list[GrpcReceiver | HttpReceiver],
            agent: Agent, runs: int, before: int) -> None:
    """``before`` runs that get out; then the collector stops, ``runs`` runs, and this
    waits until the export has really failed."""
    rx = collector[0].received
    asyncio.run(agent.run(before))
    handle.force_flush()
    _until(lambda: len(set(_received_calls(rx))) == before * agent.calls, "the spans before")
    collector[0].stop()
    asyncio.run(agent.run(runs))
    handle.force_flush(timeout_millis=200)  # what the SDK holds goes to the buffer
    _until(lambda: handle.export_status()["traces"].failing, "the export to fail")


def test_a_collector_restart_loses_no_span(collector: list[GrpcReceiver | HttpReceiver],
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="adk_task_telemetry.export")
    handle, plugin = _pipeline(collector[0])
    agent = Agent(plugin, calls=3)
    rx = collector[0].received
    try:
        _outage(handle, collector, agent, runs=10, before=3)
        asyncio.run(agent.run(2))  # still down
        collector[0] = restarted(collector[0])
        asyncio.run(agent.run(3))
        handle.force_flush(timeout_millis=200)
        # The sender finds the collector again by itself, and sends in order.
        _until(lambda: set(_received_calls(rx)) == set(agent.served), "every span")
        # An export that timed out on a loaded machine may have arrived all the same:
        # it is sent again (at least once), so wait until the sender has caught up.
        _until(lambda: handle.export_status()["traces"].buffered == 0
               and not handle.export_status()["traces"].failing, "the buffer to drain")
        status = handle.export_status()["traces"]
    finally:
        handle.shutdown()
    assert len(agent.served) == 3 * 18
    assert status.dropped == {} and not status.failing
    texts = [r.getMessage() for r in caplog.records if "traces" in r.getMessage()]
    # One line when the outage starts, one when it ends (a loaded machine may add a
    # timeout after the restart: another outage, told the same way).
    assert len(texts) % 2 == 0 and texts, texts
    for start, end in zip(texts[::2], texts[1::2], strict=True):
        assert "cannot export traces" in start and "Keeping them in a buffer" in start
        assert "works again" in end and "0 spans dropped" in end, end


def test_past_the_bound_the_oldest_are_dropped_and_exactly_they_are_counted(
        collector: list[GrpcReceiver | HttpReceiver], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="adk_task_telemetry.export")
    monkeypatch.setenv("ADK_TASK_TELEMETRY_BUFFER_SPANS", "40")
    handle, plugin = _pipeline(collector[0])
    agent = Agent(plugin, calls=1)
    rx = collector[0].received
    try:
        _outage(handle, collector, agent, runs=100, before=5)
        held = _at_rest(handle, lambda s: s.buffered <= 40)
        collector[0] = restarted(collector[0])
        _recovered(handle, rx, 5 + 40, held)
        asyncio.run(agent.run(5))
        handle.force_flush()
        _until(lambda: len(set(_received_calls(rx))) == 5 + 40 + 5, "the spans after it")
        status = handle.export_status()["traces"]
    finally:
        handle.shutdown()
    in_outage = agent.served[5:105]
    assert (held.buffered, held.dropped) == (40, {"buffer_full": 60})
    assert status.dropped == {"buffer_full": 60}
    # At least once: an export that timed out may have arrived and is sent again.
    got = set(_received_calls(rx))
    assert got == set(agent.served[:5] + in_outage[60:] + agent.served[105:])
    # The counter the plugin exports says the same.
    points = [(attrs(p.attributes), p.as_int) for _, m in rx.metric_list()
              if m.name == "adk.export.dropped" for p in m.sum.data_points]
    assert points[-1:] == [({"adk.export.signal": "traces", "adk.export.reason": "buffer_full"},
                            60)], points
    told = [r.getMessage() for r in caplog.records if "traces" in r.getMessage()
            and "works again" in r.getMessage()]
    assert len(told) == 1 and "40 spans held" in told[0] and "60 spans dropped" in told[0], told




def test_past_the_byte_bound_the_oldest_are_dropped_and_exactly_they_are_counted(
        collector: list[GrpcReceiver | HttpReceiver],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound in bytes holds too. A batch that reaches an empty buffer is sent
    unmeasured (export.py's hot path); when its export fails it comes back measured, and
    the bound drops the oldest of it like any other."""
    bound = 4000  # about ten tool_task spans, far below the 50,000-span count bound
    monkeypatch.setenv("ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES", str(bound))
    handle, plugin = _pipeline(collector[0])
    agent = Agent(plugin, calls=1)
    rx = collector[0].received
    try:
        _outage(handle, collector, agent, runs=100, before=5)
        held = _at_rest(handle, lambda s: s.buffered_bytes <= bound)
        collector[0] = restarted(collector[0])
        _recovered(handle, rx, 5 + held.buffered, held)
        asyncio.run(agent.run(5))
        handle.force_flush()
        _until(lambda: len(set(_received_calls(rx))) == 5 + held.buffered + 5, "the rest")
        status = handle.export_status()["traces"]
    finally:
        handle.shutdown()
    kept = held.buffered
    assert 0 < kept < 100 and 0 < held.buffered_bytes <= bound, held
    assert held.dropped == status.dropped == {"buffer_full": 100 - kept}
    in_outage = agent.served[5:105]
    assert set(_received_calls(rx)) == set(agent.served[:5] + in_outage[100 - kept:]
                                           + agent.served[105:])


def test_what_ends_while_the_endpoint_is_down_is_held_to_the_byte_bound(
        collector: list[GrpcReceiver | HttpReceiver],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans that end after the export has failed wait for the endpoint, so the byte
    bound applies to them at once, not at the next retry: it holds after every run.
    (They used to come into the buffer unmeasured, as the next batch does while the
    endpoint answers, and held up to two batches' worth past the bound until a retry
    failed.)"""
    bound = 4000  # about ten tool_task spans
    monkeypatch.setenv("ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES", str(bound))
    handle, plugin = _pipeline(collector[0])
    agent = Agent(plugin, calls=1)
    wide = Agent(plugin, calls=30)  # 30 spans at once: three times what fits the bound
    seen: list[SignalStatus] = []  # the status after each run of the outage
    try:
        _outage(handle, collector, agent, runs=5, before=5)
        for _ in range(2):
            asyncio.run(wide.run(1))
            seen.append(handle.export_status()["traces"])
    finally:
        handle.shutdown()
    # After every run, not only the last, and each run ends more than the bound at once:
    # a retry that fails trims the buffer to the bound, so a status read just after one
    # would hold even where what ended since came in unmeasured (the status measures all
    # that is held, inbox included). On top of the bound at most the batch of a retry in
    # flight, itself taken from within the bound (buffer.py).
    worst = max(seen, key=lambda s: s.buffered_bytes)
    assert 0 < worst.buffered_bytes <= 2 * bound, (worst, seen.index(worst))
    status = seen[-1]
    assert status.buffered + status.dropped["buffer_full"] == 65, status


def test_while_an_attempt_hangs_what_ends_is_held_to_the_bound_in_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the endpoint fails, each span is measured and the bounds applied at its
    end, not when the sender is back from an attempt that may take the whole export
    timeout: of the spans that end meanwhile, those still alive in the process are
    within the bound (and the one batch being tried). Seen while an attempt hangs on an
    endpoint that never answers. (The spans used to wait unmeasured in the sender's inbox
    meanwhile, up to 2,048 of them, whatever the byte bound.)"""
    bound = 4000  # about ten tool_task spans
    monkeypatch.setenv("ADK_TASK_TELEMETRY_BUFFER_SPAN_BYTES", str(bound))
    hole = BlackHole()
    handle = detached(endpoint=hole.endpoint, protocol="http/protobuf", timeout=4.0)
    agent = Agent(TaskTelemetryPlugin(tracer_provider=handle.tracer_provider,
                                      meter_provider=handle.meter_provider), calls=1)
    try:
        asyncio.run(agent.run(1))
        handle.force_flush(timeout_millis=200)  # the first attempt, which times out
        _until(lambda: handle.export_status()["traces"].failing, "the first attempt to fail")
        # The retry opens a connection of its own (the timed-out one is dropped).
        _until(lambda: len(hole.accepted) >= 2, "the retry to hang")
        # Only this pipeline's spans: ADK's own, of earlier tests too, may be alive in
        # contexts that other tasks still hold.
        since = time.time_ns()
        asyncio.run(agent.run(60))
        gc.collect()
        alive = sum(1 for o in gc.get_objects() if isinstance(o, ReadableSpan)
                    and o.name == "tool_task lookup" and o.end_time is not None
                    and (o.start_time or 0) >= since)
        status = handle.export_status()["traces"]
    finally:
        handle.shutdown(timeout_millis=500)
        hole.stop()
    # Within the byte bound, and the batch in flight taken from within it: at most
    # twice what fits the bound (the attempt may end meanwhile, dropping what no
    # longer fits).
    assert status.failing and 0 < status.buffered_bytes <= 2 * bound, status
    fits = bound / (status.buffered_bytes / status.buffered)
    assert alive <= 2 * fits, (alive, status)
