"""The user's path, log side: the plugin's log records through deploy/'s collector (its
logs pipeline, as committed) into VictoriaLogs, found the way a user does, through
VictoriaLogs' own LogsQL API, and the jump from a record to its trace in Jaeger and back.

The agent process (tests/stack/corpus_app.py, the shared corpus) runs with the plugin's
logger at its default level, as a user's does:

  * nothing it exports is refused: its stderr (where the SDK exporters and the
    plugin's export pipeline report a refused or failed export) holds no such line, and
    the collector's own refused and failed counters are zero while it accepted log
    records;
  * every orphan's WARNING record (the corpus' orphans, the seed bug's among them on ADK
    before 2.13) is in VictoriaLogs with the trace and span id of the orphan's tool_task
    span, found by service, tool, call id and trace id; that trace is in Jaeger, and
    Jaeger's span leads back to the record by its call id.

The expectations come from the run's ground truth (which tool bodies outlived their run,
every span the SDK ended), never from what VictoriaLogs returns.
"""

from __future__ import annotations

import re
from typing import Any

from adk_task_telemetry import semconv as sc
from tests.stack.conftest import Corpus, Stack, span_tags
from tests.stack.logstore import ARRIVES_WITHIN, ORPHAN_RECORD
from tests.stack.logstore import quoted as _q
from tests.stack.tracecheck import collector_metric, whole
from tests.stack_programs import wait_until

#: What the SDK's OTLP exporters and the plugin's export pipeline
#: (adk_task_telemetry.export) write to stderr when an export is refused or fails.
REFUSED = re.compile(r"Failed to export|rejected|cannot export|UNIMPLEMENTED|404 Not Found",
                     re.IGNORECASE)


def _orphans(corpus: Corpus) -> list[tuple[str, dict[str, Any]]]:
    """(orphaned call id, the tool_task span the agent ended for it): ground truth. A
    scenario's call ids recur in other scenarios (other traces)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for t in corpus.of_kind("orphan"):
        for call_id in t.orphaned:
            (span,) = [s for s in t.spans if s["call_id"] == call_id
                       and s["name"].startswith(sc.SPAN_NAME_PREFIX)]
            out.append((call_id, span))
    return out




def test_orphan_records_are_in_the_logs_store_with_their_trace(
        stack: Stack, corpus: Corpus) -> None:
    orphans = _orphans(corpus)
    # live_stubborn_tool, thread_pool_timeout, live_thread_pool orphan on every ADK;
    # the seed bug on ADK before 2.13.
    assert orphans, corpus.truth["units"]
    logs = stack.logs
    service = f'"service.name":={_q(corpus.service)}'
    for call_id, span in orphans:
        by_call = f'{service} {ORPHAN_RECORD} "{sc.GEN_AI_TOOL_CALL_ID}":={_q(call_id)}'
        found: list[dict[str, Any]] = []

        def arrived(query: str = by_call, trace_id: str = span["trace_id"]) -> bool:
            nonlocal found
            found = [r for r in logs.query(query) if r.get("trace_id") == trace_id]
            return bool(found)
        assert wait_until(arrived, ARRIVES_WITHIN, interval=1.0), (
            f"no record of orphan {call_id} in VictoriaLogs:\n{corpus.log.read_text()[-3000:]}")
        assert len(found) == 1, found
        record = found[0]
        assert record["_msg"].startswith("orphaned tool task:"), record
        assert f"call_id={call_id}" in record["_msg"], record
        assert record["severity_text"] == "WARN" or record["severity_number"] == "13", record
        # The record is the tool_task span's: its trace and its span.
        assert (record["trace_id"], record["span_id"]) == (span["trace_id"],
                                                         span["span_id"]), record
        tool = record[sc.GEN_AI_TOOL_NAME]
        assert tool and f"tool={tool}" in record["_msg"], record
        # Found by tool and by trace id too, as a user searches.
        by_tool = logs.query(f'{service} {ORPHAN_RECORD} "{sc.GEN_AI_TOOL_NAME}":={_q(tool)} '
                             f'"{sc.GEN_AI_TOOL_CALL_ID}":={_q(call_id)}')
        assert span["span_id"] in [r["span_id"] for r in by_tool], by_tool
        by_trace = logs.query(f'trace_id:={_q(span["trace_id"])} {ORPHAN_RECORD}')
        assert call_id in {r.get(sc.GEN_AI_TOOL_CALL_ID) for r in by_trace}, by_trace
        # Log -> trace: Jaeger holds that trace (whole), with the orphan's span in it;
        # trace -> log: the span's call id finds the record again.
        trace = next(t for t in corpus.of_kind("orphan") if t.trace_id == span["trace_id"])
        spans = whole(stack.jaeger, trace, ARRIVES_WITHIN)
        (own,) = [s for s in spans if s["spanID"] == record["span_id"]]
        tags = span_tags(own)
        assert tags[sc.ADK_TOOL_TASK_OUTCOME] == "orphaned", tags
        back = logs.query(f'trace_id:={_q(own["traceID"])} {ORPHAN_RECORD} '
                          f'"{sc.GEN_AI_TOOL_CALL_ID}":={_q(str(tags[sc.GEN_AI_TOOL_CALL_ID]))}')
        assert [r["span_id"] for r in back] == [own["spanID"]], back
    units = sorted({u for t in corpus.of_kind("orphan") for u in t.units})
    assert len({(s["trace_id"], s["span_id"]) for _, s in orphans}) == len(orphans)
    print(f"\norphan records: {len(orphans)} in VictoriaLogs with their tool_task span's "
          f"trace, each trace in Jaeger ({', '.join(units)})")


def test_nothing_the_agent_exports_is_refused(stack: Stack, corpus: Corpus) -> None:
    """The plugin's logger at its default level (corpus_app.py), every signal exported:
    no refusal in the agent's stderr, none counted by the collector."""
    port = stack.ports["collector_metrics"]
    # A positive signal first: the collector received the agent's records (the orphans'
    # at least) and sent them on.
    assert wait_until(lambda: collector_metric(port, "otelcol_exporter_sent_log_records")
                      >= len(_orphans(corpus)), ARRIVES_WITHIN, interval=1.0), (
        collector_metric(port, "otelcol_receiver_accepted_log_records"))
    assert collector_metric(port, "otelcol_receiver_accepted_spans") > 0
    assert collector_metric(port, "otelcol_receiver_accepted_metric_points") > 0
    refused = {name: collector_metric(port, name) for name in (
        "otelcol_receiver_refused_", "otelcol_receiver_failed_",
        "otelcol_exporter_send_failed_")}
    assert refused == dict.fromkeys(refused, 0.0), refused
    stderr = corpus.log.read_text(errors="replace")
    bad = [line for line in stderr.splitlines() if REFUSED.search(line)]
    assert not bad, "\n".join(bad[:20])
