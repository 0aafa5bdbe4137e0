"""ADK's own server (``get_fast_api_app`` under uvicorn), driven by real clients.

ADK installs its TracerProvider (and LoggerProvider) while it builds the app, before
agent.py is imported; agent.py then calls configure_telemetry(endpoint=...). What
must hold: our export is added to ADK's providers (so spans reach the endpoint,
ADK's own spans with them), the plugin's metrics reach it through a MeterProvider
of its own, and SIGTERM, the way ``docker stop`` and Kubernetes end a server, loses
nothing although uvicorn re-raises it and atexit never runs. Every assertion is on
what a real OTLP receiver decoded. Agents: tests/agents/telemetry_app.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .adk_server import Server, live_seed_and_leave, sse_until_function_call
from .conftest import has_seed_bug
from .otlp_receivers import GrpcReceiver, HttpReceiver, Received, attrs

FAST = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BLRP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Received]]:
    """One server for the request tests: configure_telemetry(endpoint=gRPC receiver)."""
    rx = GrpcReceiver()
    server = Server(tmp_path_factory.mktemp("served"),
                    {"ATT_CONFIGURE": "args", "ATT_ENDPOINT": rx.endpoint,
                     "ATT_PROTOCOL": "grpc", **FAST})
    try:
        yield server, rx.received
    finally:
        server.stop()
        rx.stop()


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _spans_of(rx: Received, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for span in rx.tool_spans():
        cid = attrs(span.attributes)["gen_ai.tool.call.id"]
        if cid.startswith(tag):
            assert cid not in out, f"span of {cid} arrived twice"
            out[cid] = span
    return out


def _wait_spans(rx: Received, tag: str, n: int, timeout: float = 20.0) -> dict[str, Any]:
    rx.wait_for(lambda: len(_spans_of(rx, tag)) >= n, timeout=timeout)
    spans = _spans_of(rx, tag)
    assert len(spans) == n, sorted(spans)
    return spans


def _outcome(span: Any) -> str:
    return str(attrs(span.attributes)["adk.tool_task.outcome"])


def test_configure_telemetry_under_adks_server_adds_its_export_and_says_so(
        served: tuple[Server, Received]) -> None:
    server, _ = served
    server.run(f"parallel {_tag()}")  # the agent (and so agent.py) is loaded lazily
    told = [ln for ln in server.log().splitlines() if "already installed" in ln]
    assert len(told) == 1, server.log()[-4000:]
    line = told[0]
    # ADK always installs a TracerProvider; a LoggerProvider and a MeterProvider only
    # on some versions and settings (then they are ours, installed as usual).
    assert "traces: added OTLP export to http://127.0.0.1:" in line
    assert "service.name=unknown_service" in line and "asked for served-agent" in line


def test_run_with_parallel_calls(served: tuple[Server, Received]) -> None:
    server, rx = served
    tag = _tag()
    events = server.run(f"parallel {tag}")
    assert any("functionResponse" in p for e in events
               for p in (e.get("content") or {}).get("parts") or [])
    spans = _wait_spans(rx, tag, 3)
    assert {cid: _outcome(s) for cid, s in spans.items()} == {
        f"{tag}-1": "ok", f"{tag}-2": "ok", f"{tag}-3": "ok"}
    # ADK's own spans reach the endpoint too: each task span nests under its
    # execute_tool span, in one trace.
    rx.wait_for(lambda: all(_parent(rx, s) is not None for s in spans.values()), timeout=10)
    for span in spans.values():
        parent = _parent(rx, span)
        assert parent is not None and parent.name.startswith("execute_tool ")
        assert parent.trace_id == span.trace_id
    # ADK's provider keeps its resource; the plugin's own metrics carry ours.
    assert {res["service.name"] for res, _, _ in rx.spans()} == {"unknown_service"}
    assert rx.wait_for(lambda: _started(rx).get("lookup_order", 0) >= 2, timeout=20)
    assert {res["service.name"] for res, _ in rx.metric_list()} == {"served-agent"}
    state = _settled(server)
    assert (state["runs"], state["open"], state["orphans"]) == (0, 0, 0), state


def _settled(server: Server, orphans: int = 0) -> dict[str, Any]:
    """The plugin's state once the run is over: nothing open, no run record left, and
    only ``orphans`` still running. ADK's run span ends however the run unwinds (an SSE
    or websocket disconnect too), so no garbage collection is needed for this."""
    state = server.wait_state(
        lambda s: s["open"] == 0 and s["orphans"] == orphans and s["runs"] == 0)
    assert (state["runs"], state["open"], state["orphans"]) == (0, 0, orphans), state
    return state


def test_sse_client_disconnects_mid_tool(served: tuple[Server, Received]) -> None:
    server, rx = served
    tag = _tag()
    # Let the call start, then close the connection while the tool sleeps.
    server.wait_state(lambda s: s["open"] == 0)
    sid = server.session()
    events = sse_until_function_call(server, f"slow {tag}", sid)
    assert events, "no event before the function call"
    state = _settled(server)
    assert (state["runs"], state["open"], state["orphans"]) == (0, 0, 0), state
    span = _wait_spans(rx, tag, 1)[f"{tag}-slow"]
    assert _outcome(span) == "cancelled"
    assert [e.name for e in span.events] == ["cancelled"]
    # The call ledger agrees with what ADK's server stored: a stored call with no stored
    # response is reported, in the run's trace; nothing else is.
    stored = server.stored_events(sid)
    parts = [p for e in stored for p in (e.get("content") or {}).get("parts") or []]
    calls = {p["functionCall"]["id"] for p in parts if p.get("functionCall")}
    answered = {p["functionResponse"]["id"] for p in parts if p.get("functionResponse")}

    def unanswered() -> list[tuple[Any, dict[str, Any]]]:
        return [(s, attrs(e.attributes)) for _, _, s in rx.spans() for e in s.events
                if e.name == "unanswered_call"
                and str(attrs(e.attributes).get("gen_ai.tool.call.id", "")).startswith(tag)]

    if calls - answered:
        assert calls - answered == {f"{tag}-slow"}
        assert rx.wait_for(lambda: bool(unanswered()), timeout=20)
        ((carrier, event),) = unanswered()
        assert carrier.trace_id == span.trace_id
        assert event["gen_ai.tool.name"] == "slow_search"
        assert event["adk.tool_call.unanswered.reason"] == "caller_cancelled"
    else:  # this ADK stores the call only once its response is there
        # The positive signal: the run's root span arrived, and every span the server
        # ended in that trace from the tool's span on (its own record of them): an
        # unanswered_call event, on ADK's run span or on a span of ours, came with them.
        assert rx.wait_for(lambda: _trace_arrived(server, rx, span), timeout=20)
        assert unanswered() == []


def test_live_seed_scenario_then_the_client_goes_away(
        served: tuple[Server, Received]) -> None:
    """ADK issue 7058 over the real /run_live websocket: two calls to one streaming
    tool in one live response; the client leaves. ADK < 2.13 cancels only one."""
    server, rx = served
    tag = _tag()
    before = server.state()["orphans"]
    live_seed_and_leave(server, tag)
    state = _settled(server, orphans=before + (1 if has_seed_bug() else 0))
    assert state["runs"] == 0 and state["open"] == 0, state
    spans = _wait_spans(rx, tag, 2)
    outcomes = sorted(_outcome(s) for s in spans.values())
    orphan_events = [e for s in spans.values() for e in s.events if e.name == "orphaned_task"]
    if has_seed_bug():
        assert outcomes == ["cancelled", "orphaned"]
        assert len(orphan_events) == 1
        assert state["orphans"] - before == 1  # still running in the server
    else:
        assert outcomes == ["cancelled", "cancelled"]
        assert orphan_events == []
        assert state["orphans"] == before


def _trace_arrived(server: Server, rx: Received, span: Any) -> bool:
    """``span``'s trace has reached the receiver from ``span`` on: its root span, and
    every span the server ended in that trace after ``span`` (spans that ended before
    configure_telemetry() attached our export, as on the request that loads the agent,
    are never exported)."""
    got = {s.span_id.hex(): s for _, _, s in rx.spans() if s.trace_id == span.trace_id}
    if not any(not s.parent_span_id for s in got.values()):
        return False
    ended = [s["span_id"] for s in server.state()["spans"]
             if s["trace_id"] == span.trace_id.hex()]
    mine = span.span_id.hex()
    return mine in ended and set(ended[ended.index(mine):]) <= set(got)


def _parent(rx: Received, span: Any) -> Any:
    return next((s for _, _, s in rx.spans() if s.span_id == span.parent_span_id), None)


def _started(rx: Received) -> dict[str, int]:
    """adk.tool_task.started per tool, from the last export (cumulative)."""
    out: dict[str, int] = {}
    for _, m in rx.metric_list():
        if m.name == "adk.tool_task.started":
            for p in m.sum.data_points:
                out[attrs(p.attributes)["gen_ai.tool.name"]] = p.as_int
    return out


# --- SIGTERM ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def terminated(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[dict[str, tuple[Server, Received, dict[str, Any], int, float]]]:
    """Servers that served one request each and were then sent SIGTERM, with the
    default batch delay (5 s) and metric interval (60 s): nothing would have been
    exported yet without a flush at shutdown.

    ``args``: configure_telemetry(endpoint=gRPC receiver) in agent.py.
    ``env``: OTEL_EXPORTER_OTLP_ENDPOINT set before the server starts, so ADK exports
    itself (OTLP/HTTP), and agent.py calls configure_telemetry() with no argument:
    it must not add a second exporter to the same endpoint.
    """
    grpc_rx, http_rx = GrpcReceiver(), HttpReceiver()
    setups = {
        "args": ({"ATT_CONFIGURE": "args", "ATT_ENDPOINT": grpc_rx.endpoint,
                  "ATT_PROTOCOL": "grpc"}, grpc_rx),
        "env": ({"ATT_CONFIGURE": "env", "OTEL_EXPORTER_OTLP_ENDPOINT": http_rx.endpoint,
                 "OTEL_SERVICE_NAME": "env-agent"}, http_rx),
    }
    servers: dict[str, Server] = {}
    out = {}
    try:
        for name, (env, _) in setups.items():  # started together: they mostly wait
            servers[name] = Server(tmp_path_factory.mktemp(f"sigterm-{name}"), env)
        for name, server in servers.items():
            # agent.py (and so configure_telemetry()) is loaded by the first run:
            # spans that ended before it cannot be ours to export.
            server.run(f"parallel warmup-{name}")
            mark = len(server.state()["spans"])
            server.run(f"parallel {name}")
            state = _settled(server)
            state["spans"] = state["spans"][mark:]
            t0 = time.monotonic()
            rc = server.terminate()
            out[name] = (server, setups[name][1].received, state, rc, time.monotonic() - t0)
        yield out
    finally:
        for server in servers.values():
            server.stop()
        grpc_rx.stop()
        http_rx.stop()


@pytest.mark.parametrize("setup", ["args", "env"])
def test_sigterm_loses_nothing_and_the_process_still_dies_by_it(
        setup: str,
        terminated: dict[str, tuple[Server, Received, dict[str, Any], int, float]]) -> None:
    server, rx, state, rc, _ = terminated[setup]
    assert rc == -signal.SIGTERM, server.log()[-3000:]  # uvicorn re-raised it: still dies by it
    ended = {s["span_id"] for s in state["spans"]}
    assert len(ended) >= 6  # ADK's spans of the run and our three tool_task spans
    got = [f"{s.span_id.hex()}" for _, _, s in rx.spans()]
    assert len(got) == len(set(got)), "a span arrived twice"
    missing = [s for s in state["spans"] if s["span_id"] not in set(got)]
    assert missing == [], missing
    assert {cid: _outcome(s) for cid, s in _spans_of(rx, setup).items()} == {
        f"{setup}-1": "ok", f"{setup}-2": "ok", f"{setup}-3": "ok"}
    assert _started(rx) == {"lookup_order": 4, "add_numbers": 2}  # warm-up run included
    assert "Traceback" not in server.log(), server.log()[-3000:]


def test_otel_variables_before_the_server_are_not_exported_twice(
        terminated: dict[str, tuple[Server, Received, dict[str, Any], int, float]]) -> None:
    server, rx, state, _, _ = terminated["env"]
    # ADK exports all three signals there itself: nothing of ours is added.
    assert state["actions"] == [{"traces": "already_exported", "metrics": "already_exported",
                                 "logs": "already_exported"}], state["actions"]
    assert "added OTLP export" not in server.log()
    # ADK's resource (from OTEL_SERVICE_NAME) names everything, metrics included.
    assert {res["service.name"] for res, _, _ in rx.spans()} == {"env-agent"}
    assert {res["service.name"] for res, _ in rx.metric_list()} == {"env-agent"}


def test_report_sigterm_timings(
        terminated: dict[str, tuple[Server, Received, dict[str, Any], int, float]],
        record_property: Any) -> None:
    """Not a benchmark: what SIGTERM to exit took (uvicorn's graceful shutdown and
    our flush), so that a slow flush shows up in the test report."""
    for name, (_, _, _, _, seconds) in terminated.items():
        record_property(f"sigterm_to_exit_{name}_s", round(seconds, 2))
        assert seconds < 10, f"{name}: {seconds:.1f} s from SIGTERM to exit"

