"""Stuck now, through the deploy stack (issue 33): a tool task that hangs is found while
it still hangs, in the logs store and in the live view, with the line of the tool's
code it waits on; once it ends, its span in Jaeger holds the same reports, and nothing
reports it after its end. An orphan that runs on after its run is reported the same way.

The agent process (tests/stack/corpus_app.py ``--stuck``) is a user's: the real Runner
with a scripted model, ``configure_telemetry()`` over OTLP/HTTP to a collector of its
own (deploy/otel-collector/config.yaml as committed, into the stack's Jaeger,
Prometheus and VictoriaLogs: the stack's own collector counts the corpus' traces
only, tests/stack/test_traces.py), the plugin configured by its
environment variables only (``ADK_TASK_TELEMETRY_STUCK_AFTER=1``,
``ADK_TASK_TELEMETRY_DEBUG_PORT``). Its tool ``fetch_quote`` waits on an upstream that
does not answer: call ``STUCK_CALL`` until the test creates a release file, call
``WITNESS_CALL`` (started after it) until the process ends. The orphan is the library's
``live_thread_pool`` scenario: a synchronous tool on ADK's tool thread pool whose
thread runs on after the caller left the live run.

The oracles are the tool's own code (the line it waits on, read from corpus_app.py),
the trace id the tool body saw, and what the stack's stores hold: VictoriaLogs' LogsQL
API, Jaeger's query API and the ``adk-task-telemetry tasks --json`` command run as a
user runs it. Every wait is for a positive signal; "no record after its end" is read
once the witness, which hangs exactly like the released call but started later, has
been reported at the age where the released call's next report would have been due.

The alert part (AdkToolTaskStuck firing from ``adk_tool_task_oldest_age_seconds`` to
the webhook) is tests/stack/test_alerts_live.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from adk_task_telemetry import semconv as sc
from tests.stack import corpus_app
from tests.stack.conftest import (
    Corpus,
    Stack,
    agent_process,
    collector_config,
    span_events,
    span_tags,
)
from tests.stack.logstore import ARRIVES_WITHIN, STUCK_RECORD, VictoriaLogs
from tests.stack.logstore import quoted as _q
from tests.stack_programs import REPO, free_port, running, wait_until

STUCK_AFTER_S = 1
SERVICE = "adk-stack-stuck"
#: The line the hanging tool waits on, and the synchronous orphan's (its thread's).
WAIT_CODE = "await released[symbol].wait()"
ORPHAN_CALL, ORPHAN_TOOL, ORPHAN_CODE = "call-crunch", "crunch_numbers", "probe.stop.wait(seconds)"
ORPHAN_SCENARIO = "live_thread_pool"


def _line_of(code: str) -> int:
    """The line number of ``code`` in corpus_app.py (once there)."""
    lines = Path(corpus_app.__file__).read_text().splitlines()
    (n,) = [i for i, line in enumerate(lines, start=1) if line.strip() == code]
    return n


@dataclass
class Agent:
    corpus: Corpus
    debug_port: int
    release: Path
    logs: VictoriaLogs

    def stuck_records(self, call_id: str) -> list[dict[str, Any]]:
        """The agent's stuck records of ``call_id`` in VictoriaLogs, as a user finds them."""
        return self.logs.query(f'"service.name":={_q(SERVICE)} {STUCK_RECORD} '
                               f'"{sc.GEN_AI_TOOL_CALL_ID}":={_q(call_id)}')

    def live_view(self) -> list[dict[str, Any]]:
        """Every tool task the process lists now, through the command a user runs."""
        out = subprocess.run(
            [sys.executable, "-m", "adk_task_telemetry.cli", "tasks", "--json",
             "--port", str(self.debug_port)],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        doc = json.loads(out.stdout)
        return [t for p in doc["processes"] for t in p["tasks"]]


@pytest.fixture(scope="module")
def agent(stack: Stack) -> Iterator[Agent]:
    port = free_port()
    release = stack.workdir / "stuck-release"
    env = {"ADK_TASK_TELEMETRY_STUCK_AFTER": str(STUCK_AFTER_S),
           "ADK_TASK_TELEMETRY_DEBUG_PORT": str(port),
           "ADK_TASK_TELEMETRY_DEBUG_HOST": "127.0.0.1"}
    ports = stack.collector_ports()
    collector = stack.collector("stuck-collector", collector_config(ports), ports)
    with running(collector), agent_process(
            f"http://127.0.0.1:{ports['otlp_http']}", stack.workdir,
            "--scenarios", ORPHAN_SCENARIO, "--stuck", str(release), "--service", SERVICE,
            label="stuck", timeout=300, env=env) as corpus:
        yield Agent(corpus, port, release, stack.logs)


def _ns(vl_time: str) -> int:
    """VictoriaLogs' ``_time`` (RFC 3339, nanoseconds, UTC) as Unix nanoseconds."""
    whole, _, frac = vl_time.rstrip("Z").partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return int(seconds.timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


def _report(record: dict[str, Any]) -> int:
    return int(record[sc.ADK_TOOL_TASK_STUCK_REPORT])


def _wait_records(agent: Agent, call_id: str, enough: Any, what: str
                  ) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def arrived() -> bool:
        nonlocal found
        found = agent.stuck_records(call_id)
        return bool(enough(found))
    assert wait_until(arrived, ARRIVES_WITHIN, interval=0.5), (
        f"{what}: {found}\n{agent.corpus.log.read_text(errors='replace')[-3000:]}")
    return found


def test_an_orphan_stays_stuck_after_its_run_with_its_threads_stack(agent: Agent) -> None:
    """The synchronous orphan, first (its thread gives up after 30 s): listed as
    orphaned by the live view, and reported stuck, state orphaned, after its run ended,
    with the pool thread's stack, in its tool_task span's trace and span."""
    (sent,) = [s for s in agent.corpus.truth["spans"] if s["call_id"] == ORPHAN_CALL
               and s["name"].startswith(sc.SPAN_NAME_PREFIX)]
    assert sent["outcome"] == sc.Outcome.ORPHANED, sent  # its run ended without it
    assert ORPHAN_CALL in agent.corpus.unit(ORPHAN_SCENARIO)["orphaned"]
    listed: list[dict[str, Any]] = []

    def orphaned() -> bool:
        nonlocal listed
        listed = [t for t in agent.live_view() if t["call_id"] == ORPHAN_CALL]
        return bool(listed) and listed[0]["state"] == sc.TaskState.ORPHANED
    assert wait_until(orphaned, 30, interval=0.2), listed
    (task,) = listed
    assert task["tool"] == ORPHAN_TOOL
    assert (task["stuck_at"]["function"], task["stuck_at"]["code"]) == (ORPHAN_TOOL,
                                                                       ORPHAN_CODE)
    assert (task["trace_id"], task["span_id"]) == (sent["trace_id"], sent["span_id"])

    records = _wait_records(
        agent, ORPHAN_CALL,
        lambda rs: [r for r in rs if r[sc.ADK_TOOL_TASK_STATE] == sc.TaskState.ORPHANED],
        "no stuck record of the orphan in VictoriaLogs")
    record = next(r for r in records if r[sc.ADK_TOOL_TASK_STATE] == sc.TaskState.ORPHANED)
    assert (record["trace_id"], record["span_id"]) == (sent["trace_id"], sent["span_id"])
    assert _ns(record["_time"]) > sent["end_ns"], "reported stuck after its run's end"
    frames = record[sc.CODE_STACKTRACE]
    assert f"in {ORPHAN_TOOL}\n    {ORPHAN_CODE}" in frames, frames
    assert "concurrent/futures/thread.py" in frames, frames  # the pool thread's frames
    assert f"in {ORPHAN_TOOL}" in record["_msg"] and "state=orphaned" in record["_msg"]
    print(f"\norphan {ORPHAN_CALL}: listed orphaned, reported stuck "
          f"{_ns(record['_time']) - sent['end_ns']:_} ns after its run's span ended, "
          f"at {ORPHAN_CODE} on its pool thread")


def test_a_stuck_task_is_found_while_it_runs_and_never_after_its_end(
        stack: Stack, agent: Agent) -> None:
    line = _line_of(WAIT_CODE)
    where = f"corpus_app.py:{line} in {corpus_app.STUCK_TOOL}"
    trace_id = agent.corpus.unit("stuck")["call_traces"][corpus_app.STUCK_CALL]
    began = time.monotonic()

    # While it runs (nothing releases it before the test does): the stuck record in the
    # logs store, in the task's trace, with the line it waits on.
    records = _wait_records(agent, corpus_app.STUCK_CALL, bool,
                            "no stuck record of the hanging call in VictoriaLogs")
    record = min(records, key=_report)
    assert record["trace_id"] == trace_id, record  # the trace the tool body ran in
    assert record["span_id"], record
    assert record[sc.GEN_AI_TOOL_NAME] == corpus_app.STUCK_TOOL
    assert record[sc.ADK_TOOL_TASK_STATE] == sc.TaskState.RUNNING
    assert record["severity_text"] == "WARN" or record["severity_number"] == "13", record
    assert float(record[sc.ADK_TOOL_TASK_AGE]) >= STUCK_AFTER_S
    assert record[sc.ADK_INVOCATION_ID] and record[sc.GEN_AI_CONVERSATION_ID], record
    assert "waits at " in record["_msg"] and where in record["_msg"], record["_msg"]
    frames = record[sc.CODE_STACKTRACE]
    assert (f'corpus_app.py", line {line}, in {corpus_app.STUCK_TOOL}\n    {WAIT_CODE}'
            in frames), frames
    # The live view lists it, running, at the same line, in the same trace and span.
    (task,) = [t for t in agent.live_view() if t["call_id"] == corpus_app.STUCK_CALL]
    assert task["state"] == sc.TaskState.RUNNING and task["age_s"] >= STUCK_AFTER_S, task
    assert task["stuck_at"]["file"].endswith("corpus_app.py"), task
    assert (task["stuck_at"]["line"], task["stuck_at"]["function"],
            task["stuck_at"]["code"]) == (line, corpus_app.STUCK_TOOL, WAIT_CODE), task
    assert (task["trace_id"], task["span_id"]) == (record["trace_id"], record["span_id"])
    assert task["invocation_id"] == record[sc.ADK_INVOCATION_ID]
    found_after = time.monotonic() - began

    agent.release.touch()  # the upstream answers: the call returns, its run ends

    # After its end: its tool_task span in Jaeger, in the same trace, with one
    # stuck_task event per report (the sampler keeps a trace with stuck_task events).
    name = f"{sc.SPAN_NAME_PREFIX}{corpus_app.STUCK_TOOL}"
    spans: list[dict[str, Any]] = []

    def in_jaeger() -> bool:
        nonlocal spans
        spans = [s for s in stack.jaeger.trace(trace_id) if s["operationName"] == name
                 and span_tags(s).get(sc.GEN_AI_TOOL_CALL_ID) == corpus_app.STUCK_CALL]
        return bool(spans)
    assert wait_until(in_jaeger, ARRIVES_WITHIN, interval=1.0), (
        f"no {name} span of {corpus_app.STUCK_CALL} in Jaeger (trace {trace_id})")
    (span,) = spans
    assert span["spanID"] == record["span_id"]  # one span: the record's is the final one
    assert span_tags(span)[sc.ADK_TOOL_TASK_OUTCOME] == sc.Outcome.OK
    end_ns = (span["startTime"] + span["duration"]) * 1000
    events = [e for e in span_events(span) if e.get("event") == sc.EVENT_STUCK_TASK]
    assert events, span_events(span)
    for e in events:
        assert e[sc.GEN_AI_TOOL_CALL_ID] == corpus_app.STUCK_CALL
        assert f"in {corpus_app.STUCK_TOOL}\n    {WAIT_CODE}" in e[sc.CODE_STACKTRACE]

    # Nothing after its end. Its last report so far is the m-th; had the sweep gone on
    # reporting it, report m+1 would have come at its age 2^m x stuck_after. The
    # witness hangs the same way and started later: once its report m+1 is in the logs
    # store, so would the released call's be.
    last = max(map(_report, agent.stuck_records(corpus_app.STUCK_CALL)))
    _wait_records(agent, corpus_app.WITNESS_CALL,
                  lambda rs: any(_report(r) > last for r in rs),
                  f"the witness never reached report {last + 1}")
    final = agent.stuck_records(corpus_app.STUCK_CALL)
    reports = sorted(map(_report, final))
    # Each report once, none past m (a late sweep may skip a number: one report then
    # stands for the ages it missed).
    assert len(set(reports)) == len(reports) and reports[-1] == last, reports
    late = [r["_time"] for r in final if _ns(r["_time"]) > end_ns]
    assert not late, f"stuck records after the task's end ({end_ns} ns): {late}"
    assert sorted(int(e[sc.ADK_TOOL_TASK_STUCK_REPORT]) for e in events) == reports
    assert {(r["trace_id"], r["span_id"]) for r in final} == {(trace_id, span["spanID"])}
    print(f"\nstuck {corpus_app.STUCK_CALL}: record and live view at {where} "
          f"{found_after:.1f}s after the agent was ready; released after {last} report(s); "
          f"its span in Jaeger with {len(events)} stuck_task event(s); none after its end")
