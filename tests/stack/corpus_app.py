"""An agent process as a user runs one: ``configure_telemetry()`` (default settings but
the endpoint) and the plugin, running the scenario corpus and a scripted app.

    python -m tests.stack.corpus_app ENDPOINT TRUTH.json [--clean N] [--errors N]
                                     [--scenarios a,b] [--long-run S --sessions K]
                                     [--service NAME] [--protocol grpc]
                                     [--stuck RELEASE_FILE]

What it runs:
  * the scenario library (src/adk_task_telemetry/scenarios, the seed bug among
    them), every scenario the installed ADK can run;
  * a scripted app: ``--clean`` runs whose tool calls return and ``--errors`` runs
    whose tool raises (many cheap runs: the sampler's rate is measured on them), or
    ``--load S``: clean runs back to back for S seconds (``--calls`` per run);
  * ``--long-run S --sessions K``: K concurrent live runs that last S seconds and each
    leave an orphan (the long-run case of tail sampling);
  * ``--stuck RELEASE_FILE``: first of all, two runs whose one tool call hangs on an
    upstream that does not answer (``STUCK_TOOL``): ``STUCK_CALL`` until RELEASE_FILE
    exists, ``WITNESS_CALL`` (started after it) until the end; tests/stack/test_stuck_live.py
    sets the plugin's ``stuck_after`` and debug port by their environment variables.

The ground truth it writes to TRUTH.json comes from the run itself, not from the
plugin's spans: which tool bodies were still running once their run had ended (the
scenario's Probe; the long run's own tool), which raised and which returned (the
scripted tool's record), the trace each tool body ran in (the tool's own current
span context), and every span the SDK ended in each trace (a span processor of
this process: what was handed to the exporter). Then it prints ``READY`` and keeps
running, as a server does (orphaned bodies alive, metrics pushed at the default
interval), until its stdin closes; then it stops the leftovers and shuts down.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry
from adk_task_telemetry import semconv as sc

#: Scenarios that need a plugin with options of its own (strict mode): run with one.
STRICT = {"fire_and_forget"}
SERVICE = "adk-stack-corpus"
APP = "stack-corpus"
#: ``--stuck``: the tool that hangs, the call the test releases, and the call that hangs
#: until the end (started after the first: its reports tell the test that the first's
#: next report would have been due by now).
STUCK_TOOL = "fetch_quote"
STUCK_APP = "stack_stuck"  # an identifier: ADK 1.x refuses any other app name
STUCK_CALL = "call-quote"
WITNESS_CALL = "call-quote-witness"
#: How often the release file is looked for (seconds).
RELEASE_POLL_S = 0.05


class Sent(SpanProcessor):
    """Every span this process ended (what the SDK hands to the exporter)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._ended: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None:
            return
        attrs = dict(span.attributes or {})
        record = {
            "trace_id": f"{ctx.trace_id:032x}",
            "span_id": f"{ctx.span_id:016x}",
            "parent": f"{span.parent.span_id:016x}" if span.parent else None,
            "name": span.name,
            "scope": span.instrumentation_scope.name if span.instrumentation_scope else "",
            "call_id": str(attrs.get(sc.GEN_AI_TOOL_CALL_ID, "")) or None,
            "outcome": attrs.get(sc.ADK_TOOL_TASK_OUTCOME),
            "status": span.status.status_code.name,
            "events": [e.name for e in span.events],
            "start_ns": span.start_time,
            "end_ns": span.end_time,
        }
        with self._lock:
            self.spans.append(record)
            self._ended.append(span)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def since(self, index: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.spans[index:])

    def otlp_bytes(self) -> dict[str, int]:
        """Each trace's size as one OTLP protobuf export request (what a collector
        receives of it; the tail sampler holds it in that form until it decides)."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        by_trace: dict[str, list[ReadableSpan]] = {}
        with self._lock:
            for span in self._ended:
                by_trace.setdefault(f"{span.context.trace_id:032x}", []).append(span)  # type: ignore[union-attr]
        return {tid: encode_spans(spans).ByteSize() for tid, spans in by_trace.items()}

    def mark(self) -> int:
        with self._lock:
            return len(self.spans)


class Truth:
    """Traces by id: the unit that made them, the calls the tools saw in them."""

    def __init__(self) -> None:
        self.units: list[dict[str, Any]] = []

    def add(self, unit: str, kind: str, *, orphaned: Sequence[str] = (),
            raised: Sequence[str] = (), returned: Sequence[str] = (),
            traces: dict[str, str] | None = None, note: str = "") -> None:
        """``traces``: call id -> trace id, as the tool body saw it where it did;
        else filled in from the spans carrying the call id (ADK's and ours)."""
        self.units.append({"unit": unit, "kind": kind, "orphaned": list(orphaned),
                           "raised": list(raised), "returned": list(returned),
                           "call_traces": dict(traces or {}), "note": note})


def _call_traces(spans: list[dict[str, Any]], call_ids: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in spans:
        if s["call_id"] in call_ids:
            out.setdefault(s["call_id"], s["trace_id"])
    return out


async def _library(plugin: TaskTelemetryPlugin, strict: TaskTelemetryPlugin,
                   sent: Sent, truth: Truth, names: Sequence[str] | None,
                   leftovers: list[Any]) -> None:
    from adk_task_telemetry.scenarios import SCENARIOS, run_scenario

    for name, scenario in SCENARIOS.items():
        if names is not None and name not in names:
            continue
        if not scenario.available():
            truth.add(name, "library", note="not available on this ADK")
            continue
        mark = sent.mark()
        run = await run_scenario(name, [strict if name in STRICT else plugin],
                                 close_runner="thread_pool" not in name)
        # The tools' own record: bodies still running once the scenario's runs ended.
        orphaned = run.probe.pending()
        everything = list(run.probe.tasks)
        leftovers.append(run)
        await asyncio.sleep(0.05)  # the sweep's spans (ended at the run's end)
        spans = sent.since(mark)
        truth.add(name, "library", orphaned=orphaned,
                  returned=[c for c in everything if c not in orphaned],
                  traces=_call_traces(spans, everything),
                  note=type(run.error).__name__ if run.error is not None else "")


async def _scripted(plugin: TaskTelemetryPlugin, truth: Truth, clean: int,
                    errors: int, *, calls: int = 1, load_s: float = 0.0) -> None:
    """Cheap runs of ``calls`` parallel tool calls each: ``clean`` that return, then
    ``errors`` that raise; or, with ``load_s``, clean runs back to back for that many
    seconds (load). The tool records its call id, its trace id and whether it raised."""
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    seen: dict[str, str] = {}
    raised: list[str] = []
    returned: list[str] = []

    def lookup(order_id: str, tool_context: ToolContext) -> dict[str, str]:
        """Looks an order up; order ids starting with 'bad' do not exist."""
        cid = str(tool_context.function_call_id)
        seen[cid] = f"{trace.get_current_span().get_span_context().trace_id:032x}"
        if order_id.startswith("bad"):
            raised.append(cid)
            raise LookupError(f"no order {order_id}")
        returned.append(cid)
        return {"order_id": order_id, "status": "shipped"}

    runner_sessions = InMemorySessionService()
    deadline = time.monotonic() + load_s
    i = 0
    while i < clean + errors or (load_s and time.monotonic() < deadline):
        order = f"bad-{i}" if clean <= i < clean + errors else str(i)
        model = ScriptedLlm([[call("lookup", f"s{i}-{c}", order_id=order)
                              for c in range(calls)], [text("done")]])
        i += 1
        agent = LlmAgent(name="clerk", model=model, instruction="scripted", tools=[lookup])
        runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                        session_service=runner_sessions)
        session = await runner_sessions.create_session(app_name=APP, user_id="u")
        msg = types.Content(role="user", parts=[types.Part(text="where is my order")])
        with contextlib.suppress(Exception):
            async for _ in runner.run_async(user_id="u", session_id=session.id,
                                            new_message=msg):
                pass
    truth.add("scripted", "scripted", raised=raised, returned=returned, traces=seen)


async def _long_runs(plugin: TaskTelemetryPlugin, truth: Truth, seconds: float,
                     sessions: int, leftovers: list[Any]) -> None:
    """``sessions`` concurrent live sessions of ``seconds`` each: a streaming tool starts
    at once and ignores the teardown's cancellation (an application's stubborn tool),
    so it is orphaned when the caller leaves at the end; the model speaks now and then
    meanwhile."""
    stop = asyncio.Event()
    results = await asyncio.gather(*(_long_run(plugin, seconds, i, stop)
                                     for i in range(sessions)))
    seen: dict[str, str] = {}
    orphaned: list[str] = []
    lasted = []
    for call_traces, still, took in results:
        seen.update(call_traces)
        orphaned.extend(still)
        lasted.append(took)
    truth.add("long_run", "long_run", orphaned=orphaned, traces=seen,
              note=f"{sessions} sessions of {min(lasted):.1f}-{max(lasted):.1f}s")

    class _Stop:
        async def cleanup(self) -> None:
            stop.set()
            await asyncio.sleep(0)

    class _Leftover:
        probe = _Stop()
    leftovers.append(_Leftover())


async def _long_run(plugin: TaskTelemetryPlugin, seconds: float, index: int,
                    stop: asyncio.Event) -> tuple[dict[str, str], list[str], float]:
    from google.adk.agents import LlmAgent
    from google.adk.agents.live_request_queue import LiveRequestQueue
    from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    seen: dict[str, str] = {}
    tasks: dict[str, asyncio.Task[Any]] = {}
    started = asyncio.Event()

    async def watch_call(topic: str, tool_context: ToolContext) -> Any:
        """Streams what is said on a topic until told to stop."""
        cid = str(tool_context.function_call_id)
        seen[cid] = f"{trace.get_current_span().get_span_context().trace_id:032x}"
        task = asyncio.current_task()
        assert task is not None
        tasks[cid] = task
        started.set()
        while not stop.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await stop.wait()
        yield f"{topic}: over"

    model = ScriptedLlm()
    agent = LlmAgent(name="voice", model=model, instruction="scripted", tools=[watch_call])
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name=APP, user_id="u")
    queue = LiveRequestQueue()
    config = RunConfig(streaming_mode=StreamingMode.BIDI,
                       response_modalities=[types.Modality.TEXT])
    agen = runner.run_live(user_id="u", session_id=session.id, live_request_queue=queue,
                           run_config=config)
    begun = time.monotonic()
    model.say_live(call("watch_call", f"long-watch-{index}", topic="weather"))

    async def consume() -> None:
        async for _ in agen:
            pass

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(started.wait(), 30)
    while time.monotonic() - begun < seconds:
        model.say_live(text("still listening"))
        await asyncio.sleep(min(0.5, max(0.0, seconds - (time.monotonic() - begun))))
    consumer.cancel()  # the caller leaves
    with contextlib.suppress(BaseException):
        await consumer
    with contextlib.suppress(Exception):
        await agen.aclose()
    queue.close()
    took = time.monotonic() - begun
    await asyncio.sleep(0.2)
    return seen, [c for c, t in tasks.items() if not t.done()], took


async def _stuck(plugin: TaskTelemetryPlugin, truth: Truth, release_file: str,
                 leftovers: list[Any]) -> None:
    """``STUCK_CALL`` and then ``WITNESS_CALL``, each in its own run, each hanging in
    ``STUCK_TOOL`` on an upstream that does not answer: the first until ``release_file``
    exists, the witness until the end. Returns once both tool bodies wait; the runs go
    on in the background (the first ends once released)."""
    from pathlib import Path

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from adk_task_telemetry.scenarios import ScriptedLlm, call, text

    # Each call asks for its own symbol, whose upstream answers when released. (No
    # ToolContext parameter: ADK 1.x resolves a tool's annotations in its module's
    # globals, where ADK's names are not imported.)
    symbols = {STUCK_CALL: "GOOG", WITNESS_CALL: "MSFT"}
    seen: dict[str, str] = {}
    started = {s: asyncio.Event() for s in symbols.values()}
    released = {s: asyncio.Event() for s in symbols.values()}

    async def fetch_quote(symbol: str) -> dict[str, str]:
        """Fetches a quote from an upstream that does not answer until released."""
        seen[symbol] = f"{trace.get_current_span().get_span_context().trace_id:032x}"
        started[symbol].set()
        await released[symbol].wait()
        return {"symbol": symbol, "price": "1"}

    async def one_run(call_id: str) -> None:
        model = ScriptedLlm([[call(STUCK_TOOL, call_id, symbol=symbols[call_id])],
                             [text("done")]])
        agent = LlmAgent(name="trader", model=model, instruction="scripted",
                         tools=[fetch_quote])
        runner = Runner(app=App(name=STUCK_APP, root_agent=agent, plugins=[plugin]),
                        session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name=STUCK_APP,
                                                              user_id="u")
        msg = types.Content(role="user", parts=[types.Part(text="quote")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            pass

    async def release_when_told() -> None:
        while not Path(release_file).exists():
            await asyncio.sleep(RELEASE_POLL_S)
        released[symbols[STUCK_CALL]].set()

    runs = []
    for call_id in (STUCK_CALL, WITNESS_CALL):
        run = asyncio.ensure_future(one_run(call_id))
        runs.append(run)
        waiting = asyncio.ensure_future(started[symbols[call_id]].wait())
        await asyncio.wait({run, waiting}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            waiting.cancel()
            if run.done():
                run.result()  # the run's own error: it ended before its tool started
            raise TimeoutError(f"{call_id}: the tool did not start in 60 s")
    runs.append(asyncio.ensure_future(release_when_told()))
    truth.add("stuck", "stuck", traces={c: seen[sym] for c, sym in symbols.items()},
              note=f"{STUCK_CALL} until {release_file} exists; {WITNESS_CALL} until the end")

    class _Release:
        async def cleanup(self) -> None:
            for event in released.values():
                event.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*runs[:2]), 10)
            runs[2].cancel()

    class _Leftover:
        probe = _Release()
    leftovers.append(_Leftover())


async def main(args: argparse.Namespace) -> None:
    # ADK's own chatter off stderr; the plugin's logger stays at its default level, as a
    # user has it: its records go out by OTLP, its export warnings to stderr (read by
    # tests/stack/test_logs.py).
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    handle = configure_telemetry(args.service, endpoint=args.endpoint, protocol=args.protocol)
    sent = Sent()
    provider = trace.get_tracer_provider()
    provider.add_span_processor(sent)  # type: ignore[attr-defined]
    plugin = TaskTelemetryPlugin()
    strict = TaskTelemetryPlugin(track_spawned_tasks=True, cancel_orphans=True)
    truth = Truth()
    leftovers: list[Any] = []
    started = time.monotonic()
    if args.stuck:
        await _stuck(plugin, truth, args.stuck, leftovers)
    if args.long_run:
        await _long_runs(plugin, truth, args.long_run, args.sessions, leftovers)
    if args.scenarios != "none":
        names = None if args.scenarios == "all" else args.scenarios.split(",")
        await _library(plugin, strict, sent, truth, names, leftovers)
    if args.clean or args.errors or args.load:
        await _scripted(plugin, truth, args.clean, args.errors, calls=args.calls,
                        load_s=args.load)
    await asyncio.sleep(0.1)
    with open(args.truth, "w") as f:
        json.dump({"service": args.service, "seconds": round(time.monotonic() - started, 1),
                   "units": truth.units, "spans": sent.since(0),
                   "otlp_bytes": sent.otlp_bytes()}, f)
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for run in leftovers:
        with contextlib.suppress(Exception):
            await run.probe.cleanup()
    handle.shutdown()


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("endpoint")
    p.add_argument("truth")
    p.add_argument("--clean", type=int, default=0)
    p.add_argument("--errors", type=int, default=0)
    p.add_argument("--calls", type=int, default=1, help="parallel calls per scripted run")
    p.add_argument("--load", type=float, default=0.0,
                   help="seconds of clean scripted runs back to back")
    p.add_argument("--scenarios", default="all", help="all, none, or a,b,c")
    p.add_argument("--long-run", type=float, default=0.0, help="seconds of each long run")
    p.add_argument("--sessions", type=int, default=1, help="concurrent long runs")
    p.add_argument("--service", default=SERVICE)
    p.add_argument("--protocol", default=None, help="grpc or http/protobuf (default: http)")
    p.add_argument("--stuck", metavar="RELEASE_FILE", default="",
                   help="two hanging calls first, one released when RELEASE_FILE exists")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
