"""The soak, short: ADK's server under concurrent real clients, the collector stopped
for a few seconds mid-load and started again on the same port (tests/soak.py; the
full one, with figures: ``make soak``, docs/reliability.md).

Batch delays are short here (0.5 s, metrics each second) and so is the export timeout
(1 s: the exporters' own retries would otherwise bridge a 4 s outage), so that every
signal meets the outage within a few seconds; the full soak keeps the SDK's defaults.
"""

from __future__ import annotations

from pathlib import Path

from .soak import run

FAST = {"OTEL_BSP_SCHEDULE_DELAY": "500", "OTEL_BLRP_SCHEDULE_DELAY": "500",
        "OTEL_METRIC_EXPORT_INTERVAL": "1000", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000"}


def test_a_collector_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    fig = run(tmp_path, seconds=20, outage=4, clients=12, env=FAST)
    assert fig.client_errors == [], fig.client_errors
    assert fig.requests.get("parallel", 0) > 0 and fig.requests.get("linger_live", 0) > 0
    told = "\n".join(fig.recovery_log)
    for signal in ("traces", "metrics", "logs"):  # every signal really met the outage
        assert f"cannot export {signal} " in told and f"export of {signal} " in told, told
    assert fig.tool_tasks_lost_started_by_outage_end == 0
    assert fig.tool_tasks_received == fig.tool_tasks_expected > 0
    assert fig.spans_lost == 0 and fig.dropped_reported == {
        "traces": {}, "metrics": {}, "logs": {}}, (fig.spans_lost, fig.dropped_reported)
    # Each live session left an orphan; its event arrived with its span.
    assert fig.orphan_events_received == fig.requests["linger_live"]


def test_an_outage_longer_than_the_buffer_loses_exactly_what_it_counts(
        tmp_path: Path) -> None:
    fig = run(tmp_path, seconds=20, outage=4, clients=12, env=FAST,
              buffer_spans=100)
    assert fig.client_errors == [], fig.client_errors
    dropped = fig.dropped_reported["traces"]
    assert dropped.get("buffer_full", 0) > 0, fig.dropped_reported
    # Each span the receiver did not confirm is counted: lost, or (its export timed out
    # on a loaded machine, the receiver decoding it after the exporter gave up) arrived
    # unconfirmed. Nothing more is counted, nothing less.
    assert fig.spans_lost + fig.spans_unconfirmed == sum(dropped.values()), (
        fig.spans_lost, fig.spans_unconfirmed, dropped)
    assert fig.tool_tasks_expected - fig.tool_tasks_received <= fig.spans_lost
