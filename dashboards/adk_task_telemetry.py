"""The adk-task-telemetry Grafana dashboard, as code (grafana-foundation-sdk, Grafana 11.6).

    python dashboards/adk_task_telemetry.py           # writes dashboards/generated/*.json
    python dashboards/adk_task_telemetry.py --check   # exits 1 when the JSON is stale

Metric and label names follow docs/telemetry.md ("In Prometheus"). Every query works
whichever way the metrics reached Prometheus (the collector, Prometheus' OTLP
receiver, a scrape of the agent's /metrics): each one aggregates by the contract's
own labels and filters on ``job``, which all three paths set (the scrape job, or
``service.name`` over OTLP); ``instance``, ``service_name`` and ``otel_scope_*``
labels, present on some paths only, are never relied on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

UID = "adk-task-telemetry"
TITLE = "ADK tool tasks"
OUTPUT = Path(__file__).resolve().parent / "generated" / f"{UID}.json"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Contract names (docs/telemetry.md), as Prometheus spells them.
STARTED = "adk_tool_task_started_total"
ACTIVE = "adk_tool_task_active"
DURATION = "adk_tool_task_duration_seconds"
ORPHANED = "adk_tool_task_orphaned_total"
ORPHANS_ALIVE = "adk_tool_task_orphans_alive"
ORPHAN_LIFETIME = "adk_tool_task_orphan_lifetime_seconds"
UNANSWERED = "adk_tool_call_unanswered_total"
OVERFLOW = "adk_tool_task_overflow_total"
#: The plugin's export losses: labelled by job, signal and reason only (no tool).
EXPORT_DROPPED = "adk_export_dropped_total"
# The collectors' own metrics (service.telemetry, scraped from :8888; collector 0.161.0
# names its counters without _total). Their job is the collector's, not an agent's:
# these panels ignore the dashboard's variables and show every collector.
COLLECTOR_REFUSED = '{__name__=~"otelcol_receiver_refused_(spans|metric_points|log_records)"}'
COLLECTOR_FAILED = ('{__name__=~"otelcol_exporter_(send|enqueue)_failed_'
                    '(spans|metric_points|log_records)"}')
TS_HELD = "otelcol_processor_tail_sampling_sampling_traces_on_memory"
TS_EVICTED = "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early"
#: Spans after their trace's decision, dropped (decided not sampled) or forwarded.
TS_LATE = "otelcol_processor_tail_sampling_early_releases_from_cache_decision"
# ADK's tool thread pool (synchronous tools): gauges of the process, not of a tool.
POOL_BUSY = "adk_tool_thread_pool_busy"
POOL_QUEUED = "adk_tool_thread_pool_queued"
POOL_MAX_WORKERS = "adk_tool_thread_pool_max_workers"

#: The min step ("interval") of every query that rates over $__rate_interval. The SDK
#: pushes metrics every 60 s (OTEL_METRIC_EXPORT_INTERVAL's default) and Grafana makes
#: $__rate_interval max($__interval + s, 4 * s), s = the query's min step, else the
#: datasource's timeInterval (15s when unset). With s = 1m the window is 4m or more:
#: several pushes, whatever interval the user's own Prometheus datasource declares (at
#: 15s, a 60s window holds one push and rate() returns nothing). Scrapes every 15 s lose
#: nothing but resolution. Push slower than this and raise it (docs/deploy.md).
MIN_STEP = "1m"

COUNT = DURATION + "_count"
BUCKET = DURATION + "_bucket"

FILTER = ('job=~"$job", adk_app_name=~"$app", gen_ai_agent_name=~"$agent", '
          'gen_ai_tool_name=~"$tool"')


def sel(metric: str, extra: str = "") -> str:
    """``metric{<dashboard filter>[, extra]}``."""
    return f"{metric}{{{FILTER}{', ' + extra if extra else ''}}}"


def outcome(metric: str, value: str) -> str:
    """``metric`` filtered to one outcome (or a regex of outcomes)."""
    op = "=~" if "|" in value else "="
    return sel(metric, f'adk_tool_task_outcome{op}"{value}"')


def new_orphans(window: str, *, value_first: bool) -> str:
    """Orphans in ``window``, including those a series held at its first sample."""
    return new_in(ORPHANED, window, value_first=value_first)


def by_job(metric: str) -> str:
    """``metric{job=~"$job"}``: for series of the process, not of a tool."""
    return f'{metric}{{job=~"$job"}}'


def new_in(counter: str, window: str, *, value_first: bool,
           select: Callable[[str], str] = sel) -> str:
    """Increase of ``counter`` in ``window``, including what a series held at its
    first sample.

    ``increase()`` cannot see a counter whose first sample is already above zero;
    for a series Prometheus did not have ``window`` ago, its value counts instead.
    ``value_first`` puts that branch first (a total over the range: it must win
    for new series); otherwise it only fills in where increase() has no value
    yet (a graph: the first points of a new series).
    """
    inc = f"increase({select(counter)}[{window}])"
    new = f"({select(counter)} unless {select(counter)} offset {window})"
    return f"{new} or {inc}" if value_first else f"{inc} or {new}"


def query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
          exemplar: bool = False, fmt: str | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    q = q.instant() if instant else q.range()
    if exemplar:
        q = q.exemplar(True)
    if "$__rate_interval" in expr:
        q = q.interval(MIN_STEP)
    if fmt == "table":
        q = q.format("table")  # type: ignore[arg-type]
    return q


def stat_panel(title: str, description: str, expr: str, unit: str, *,
               thresholds: list[tuple[float | None, str]] | None = None) -> stat.Panel:
    steps = [dm.Threshold(value=v, color=c) for v, c in (thresholds or [(None, "green")])]
    return (
        stat.Panel().title(title).description(description).datasource(DS)
        .with_target(query(expr, instant=True))
        .unit(unit).height(4).span(4)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .graph_mode(cm.BigValueGraphMode.NONE)
        .color_mode(cm.BigValueColorMode.BACKGROUND if thresholds else cm.BigValueColorMode.VALUE)
        .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
    )


Targets = list[cogbuilder.Builder[cogvariants.Dataquery]]


def ts_panel(title: str, description: str, targets: Targets, unit: str,
             *, span: int = 12, bars: bool = False) -> timeseries.Panel:
    p = (
        timeseries.Panel().title(title).description(description).datasource(DS)
        .targets(targets).unit(unit).height(8).span(span)
        .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
                .calcs(["lastNotNull", "max"]))
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI)
                 .sort(cm.SortOrder.DESCENDING))
    )
    if bars:
        p = p.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(60)
    return p


def variables() -> list[Any]:
    src = f"{STARTED}"
    scoped = [
        ("job", "Job", f"label_values({src}, job)",
         "Prometheus job: the scrape job, or service.name when metrics came by OTLP."),
        ("app", "App", f'label_values({src}{{job=~"$job"}}, adk_app_name)',
         "ADK app name (adk.app.name)."),
        ("agent", "Agent",
         f'label_values({src}{{job=~"$job", adk_app_name=~"$app"}}, gen_ai_agent_name)',
         "Agent that owns the tool (gen_ai.agent.name)."),
        ("tool", "Tool",
         f'label_values({src}{{job=~"$job", adk_app_name=~"$app", '
         f'gen_ai_agent_name=~"$agent"}}, gen_ai_tool_name)',
         "Tool name (gen_ai.tool.name)."),
    ]
    out: list[Any] = [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus")
        .description("Prometheus that holds the adk_tool_task_* metrics.")
    ]
    for name, label, q, desc in scoped:
        out.append(
            db.QueryVariable(name).label(label).description(desc).datasource(DS).query(q)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).multi(True).include_all(True)
            .all_value(".*").current(dm.VariableOption(text="All", value="$__all",
                                                       selected=True))
            .sort(dm.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
        )
    return out


def build() -> db.Dashboard:
    rate = "$__rate_interval"
    d = (
        db.Dashboard(TITLE).uid(UID)
        .description("Lifecycle of ADK tool tasks (adk-task-telemetry): starts, active tasks, "
                     "outcomes, durations and orphaned tasks still running after their run.")
        .tags(["adk", "opentelemetry", "adk-task-telemetry"])
        .time("now-1h", "now").refresh("30s").timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .readonly()
    )
    for v in variables():
        d = d.with_variable(v)

    d = d.with_row(db.Row("Overview"))
    d = d.with_panel(stat_panel(
        "Tool tasks per second",
        "Tool tasks started per second over the dashboard's rate interval, all selected "
        "tools together (adk_tool_task_started_total).",
        f"sum(rate({sel(STARTED)}[{rate}]))", "reqps"))
    d = d.with_panel(stat_panel(
        "Active tasks",
        "Tool tasks running inside their run right now (adk_tool_task_active). Orphans are "
        "not counted here: see 'Orphans still alive'.",
        f"sum({sel(ACTIVE)}) or on() vector(0)", "none"))
    d = d.with_panel(stat_panel(
        "Orphans in the range",
        "Tool tasks still running when their run ended, in the dashboard's time range "
        "(adk_tool_task_orphaned_total). Series first seen inside the range count with "
        "their whole value, so orphans from before a process's first scrape are not lost. "
        "Anything above zero is a bug to chase: see docs/runbooks/AdkToolTaskOrphaned.md.",
        f"sum({new_orphans('$__range', value_first=True)}) or on() vector(0)", "none",
        thresholds=[(None, "green"), (1, "red")]))
    d = d.with_panel(stat_panel(
        "Orphans still alive",
        "Orphaned tool tasks that are still running after their run ended "
        "(adk_tool_task_orphans_alive). They hold memory, sockets and quota.",
        f"sum({sel(ORPHANS_ALIVE)}) or on() vector(0)", "none",
        thresholds=[(None, "green"), (1, "red")]))
    d = d.with_panel(stat_panel(
        "Error rate",
        "Share of tool tasks that ended in the range with outcome=error (raised and not "
        "recovered by a callback), from adk_tool_task_duration_seconds_count.",
        f"sum(increase({outcome(COUNT, 'error')}[$__range])) / "
        f"sum(increase({sel(COUNT)}[$__range]))", "percentunit",
        thresholds=[(None, "green"), (0.05, "orange"), (0.1, "red")]))
    d = d.with_panel(stat_panel(
        "Cancellation rate",
        "Share of tool tasks that ended in the range with outcome=cancelled (a failed "
        "sibling, the caller, run teardown or stop_streaming cancelled them).",
        f"sum(increase({outcome(COUNT, 'cancelled')}[$__range])) / "
        f"sum(increase({sel(COUNT)}[$__range]))", "percentunit",
        thresholds=[(None, "green"), (0.2, "orange")]))

    d = d.with_row(db.Row("Lifecycle"))
    d = d.with_panel(ts_panel(
        "Tool tasks per second by tool",
        "Tool tasks started per second, by agent and tool (adk_tool_task_started_total).",
        [query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) (rate({sel(STARTED)}[{rate}]))",
               "{{gen_ai_agent_name}} / {{gen_ai_tool_name}}")], "reqps", span=8))
    d = d.with_panel(ts_panel(
        "Active tasks by tool and kind",
        "Tool tasks running inside their run, by tool and task kind (call, streaming, "
        "non_blocking, long_running). A line that only grows means tasks never end: see "
        "the AdkToolTaskStuck alert.",
        [query(f"sum by (gen_ai_tool_name, adk_tool_task_kind) ({sel(ACTIVE)})",
               "{{gen_ai_tool_name}} ({{adk_tool_task_kind}})")], "none", span=8))
    d = d.with_panel(ts_panel(
        "Error and cancellation rates",
        "Share of ended tool tasks per outcome error, cancelled and recovered, over the rate "
        "interval (adk_tool_task_duration_seconds_count by adk_tool_task_outcome).",
        [query(f"sum by (adk_tool_task_outcome) "
               f"(rate({outcome(COUNT, 'error|cancelled|recovered')}[{rate}])) "
               f"/ on() group_left() sum(rate({sel(COUNT)}[{rate}]))",
               "{{adk_tool_task_outcome}}")], "percentunit", span=8))

    d = d.with_row(db.Row("Orphans"))
    d = d.with_panel(ts_panel(
        "Orphans by tool and agent",
        "Tool tasks still running when their run ended, by agent and tool "
        "(adk_tool_task_orphaned_total), per rate interval; a new series shows its first "
        "value too. Exemplars (the dots; OTLP paths only) link to the orphan's trace in "
        "Jaeger, where the orphaned_task event holds the call id and the stack it is "
        "suspended in.",
        [query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) "
               f"({new_orphans(rate, value_first=False)})",
               "{{gen_ai_agent_name}} / {{gen_ai_tool_name}}", exemplar=True)],
        "none", span=12, bars=True))
    d = d.with_panel(ts_panel(
        "Orphans still alive",
        "Orphaned tool tasks still running after their run ended, by agent and tool "
        "(adk_tool_task_orphans_alive). A line that stays above zero for 15 minutes fires "
        "AdkToolTaskOrphansAlive.",
        [query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) ({sel(ORPHANS_ALIVE)})",
               "{{gen_ai_agent_name}} / {{gen_ai_tool_name}}")], "none", span=12))

    d = d.with_row(db.Row("Tool thread pool"))
    pool = '{job=~"$job"}'  # the pool is no tool's, agent's or app's: by job only
    d = d.with_panel(ts_panel(
        "Tool thread pool threads",
        "Threads of ADK's tool thread pools (RunConfig.tool_thread_pool_config) running a "
        "synchronous tool call (adk_tool_thread_pool_busy) against the pools' size "
        "(adk_tool_thread_pool_max_workers). A synchronous tool cut by its caller keeps "
        "its thread until it returns (an orphan, above): busy at max_workers is a pool "
        "held by stuck calls.",
        [query(f"sum by (job) ({POOL_BUSY}{pool})", "{{job}} busy", "A"),
         query(f"sum by (job) ({POOL_MAX_WORKERS}{pool})", "{{job}} max_workers", "B")],
        "none", span=12))
    d = d.with_panel(ts_panel(
        "Calls waiting for a pool thread",
        "Synchronous tool calls queued because every thread of their tool thread pool is "
        "busy (adk_tool_thread_pool_queued). Above zero the pool is saturated: new calls "
        "wait before they start.",
        [query(f"sum by (job) ({POOL_QUEUED}{pool})", "{{job}} queued")], "none", span=12))

    d = d.with_row(db.Row("Calls without answers"))
    d = d.with_panel(ts_panel(
        "Unanswered calls by tool and reason",
        "Function calls with no function response in the session when their run ended "
        "(adk_tool_call_unanswered_total), by tool and what became of the call's task "
        "(adk_tool_call_unanswered_reason: sibling_failed, caller_cancelled, error, "
        "orphaned, unknown), per rate interval; a new series shows its first value too. "
        "The next model turn on such a session may be refused: see "
        "docs/runbooks/AdkToolCallUnanswered.md.",
        [query(f"sum by (gen_ai_tool_name, adk_tool_call_unanswered_reason) "
               f"({new_in(UNANSWERED, rate, value_first=False)})",
               "{{gen_ai_tool_name}} ({{adk_tool_call_unanswered_reason}})")],
        "none", span=24, bars=True))

    d = d.with_row(db.Row("Durations and cancellations"))
    d = d.with_panel(ts_panel(
        "Duration percentiles by tool and outcome",
        "p50 and p95 of tool-task lifetime, creation to end, for tasks that ended inside "
        "their run, by tool and outcome (adk_tool_task_duration_seconds). Orphans are not "
        "in here: they have no end inside their run.",
        [query(f"histogram_quantile(0.95, sum by (le, gen_ai_tool_name, adk_tool_task_outcome) "
               f"(rate({sel(BUCKET)}[{rate}])))",
               "p95 {{gen_ai_tool_name}} {{adk_tool_task_outcome}}", "A"),
         query(f"histogram_quantile(0.5, sum by (le, gen_ai_tool_name, adk_tool_task_outcome) "
               f"(rate({sel(BUCKET)}[{rate}])))",
               "p50 {{gen_ai_tool_name}} {{adk_tool_task_outcome}}", "B")], "s", span=12))
    d = d.with_panel(ts_panel(
        "Cancellations by cause",
        "Cancelled tool tasks per second by cause (adk_tool_task_cancel_cause on the "
        "duration points of tasks cancelled inside their run: sibling_failed, "
        "caller_cancelled, run_teardown, stop_streaming); orphan_cancelled is an orphan "
        "cancelled after its run ended (adk_tool_task_orphan_lifetime_seconds, "
        "outcome=cancelled).",
        [query(f"sum by (adk_tool_task_cancel_cause) "
               f"(rate({outcome(COUNT, 'cancelled')}[{rate}]))",
               "{{adk_tool_task_cancel_cause}}", "A"),
         query(f"sum(rate({outcome(ORPHAN_LIFETIME + '_count', 'cancelled')}[{rate}])) "
               "or on() vector(0)",
               "orphan_cancelled", "B")], "reqps", span=12, bars=True))

    d = pipeline_health(d, rate)

    d = d.with_row(db.Row("Worst tools"))
    worst = (
        table.Panel().title("Worst tools")
        .description("Tools by errors and orphans in the dashboard's time range: tasks "
                     "started, ended in error, cancelled, orphaned (counting new series "
                     "with their whole value) and p95 duration. Sorted by orphans, then "
                     "errors.")
        .datasource(DS).height(10).span(24)
        .targets([
            query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) "
                  f"(increase({sel(STARTED)}[$__range]))", ref="Started", instant=True,
                  fmt="table"),
            query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) (increase("
                  f"{outcome(COUNT, 'error')}[$__range]))",
                  ref="Errors", instant=True, fmt="table"),
            query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) (increase("
                  f"{outcome(COUNT, 'cancelled')}[$__range]))",
                  ref="Cancelled", instant=True, fmt="table"),
            query(f"sum by (gen_ai_agent_name, gen_ai_tool_name) "
                  f"({new_orphans('$__range', value_first=True)})",
                  ref="Orphans", instant=True, fmt="table"),
            query(f"histogram_quantile(0.95, sum by (le, gen_ai_agent_name, gen_ai_tool_name) "
                  f"(increase({sel(BUCKET)}[$__range])))",
                  ref="p95", instant=True, fmt="table"),
        ])
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {"Time": True},
            "indexByName": {"gen_ai_tool_name": 0, "gen_ai_agent_name": 1},
            "renameByName": {
                "gen_ai_tool_name": "Tool", "gen_ai_agent_name": "Agent",
                "Value #Started": "Started", "Value #Errors": "Errors",
                "Value #Cancelled": "Cancelled", "Value #Orphans": "Orphans",
                "Value #p95": "p95 duration (s)",
            },
        }))
        .sort_by([cb.TableSortByFieldState().display_name("Orphans").desc(True),
                  cb.TableSortByFieldState().display_name("Errors").desc(True)])
    )
    return d.with_panel(worst)


def pipeline_health(d: db.Dashboard, rate: str) -> db.Dashboard:
    """What the pipeline loses: the plugin's own loss counters and the collectors'
    (the loss alerts' metrics; docs/runbooks/). Every query shows 0 when nothing is
    lost, so an empty panel means the metric is not collected, not "no loss"."""
    zero = "or on() vector(0)"
    d = d.with_row(db.Row("Pipeline health"))
    d = d.with_panel(ts_panel(
        "Telemetry dropped by the agents",
        "Spans, metric exports and log records the plugin's OTLP export dropped "
        "(adk_export_dropped_total), by job, signal and reason (buffer_full, "
        "exit_budget, rejected), per rate interval; a new series shows its first value "
        "too (the counter arrives when the endpoint answers again). See "
        "docs/runbooks/AdkTelemetryExportDropped.md.",
        [query(f"sum by (job, adk_export_signal, adk_export_reason) "
               f"({new_in(EXPORT_DROPPED, rate, value_first=False, select=by_job)}) {zero}",
               "{{job}} {{adk_export_signal}} ({{adk_export_reason}})")],
        "none", span=12, bars=True))
    d = d.with_panel(ts_panel(
        "Tool tasks not tracked (max_open_tasks)",
        "Tool tasks the plugin did not track because max_open_tasks records were open "
        "(adk_tool_task_overflow_total), by tool, per rate interval: no span, no "
        "duration, no orphan report for them. See docs/runbooks/AdkToolTaskOverflow.md.",
        [query(f"sum by (gen_ai_tool_name) "
               f"({new_in(OVERFLOW, rate, value_first=False)}) {zero}",
               "{{gen_ai_tool_name}}")], "none", span=12, bars=True))
    d = d.with_panel(ts_panel(
        "Collectors: refused by receivers",
        "Spans, metric points and log records the collectors' receivers refused, per "
        "second, by collector job and receiver (otelcol_receiver_refused_*; the memory "
        "limiter's refusals are among them). All collectors, whatever $job. See "
        "docs/runbooks/OtelCollectorRefusing.md.",
        [query(f"sum by (job, receiver) (rate({COLLECTOR_REFUSED}[{rate}])) {zero}",
               "{{job}} {{receiver}}")], "reqps", span=8))
    d = d.with_panel(ts_panel(
        "Collectors: export failures",
        "Items the collectors' exporters lost, per second, by collector job and "
        "exporter: sends that failed after their retries "
        "(otelcol_exporter_send_failed_*) and a full sending queue "
        "(otelcol_exporter_enqueue_failed_*). See "
        "docs/runbooks/OtelCollectorExportFailing.md.",
        [query(f"sum by (job, exporter) (rate({COLLECTOR_FAILED}[{rate}])) {zero}",
               "{{job}} {{exporter}}")], "reqps", span=8))
    d = d.with_panel(ts_panel(
        "Tail sampling: held, evicted and late",
        "Traces the tail samplers hold undecided (" + TS_HELD + "), traces evicted "
        "before their decision per second (num_traces reached: " + TS_EVICTED + ") and "
        "spans arriving after their trace was decided not sampled, dropped, per second ("
        + TS_LATE + ' sampled="false"), by collector job. See '
        "docs/runbooks/OtelCollectorTracesDroppedTooEarly.md and OtelCollectorLateSpans.md.",
        [query(f"sum by (job) ({TS_HELD}) {zero}", "{{job}} held traces", "A"),
         query(f"sum by (job) (rate({TS_EVICTED}[{rate}])) {zero}",
               "{{job}} evicted undecided /s", "B"),
         query(f'sum by (job) (rate({TS_LATE}{{sampled="false"}}[{rate}])) {zero}',
               "{{job}} late spans dropped /s", "C")], "none", span=8))
    return d


def render() -> str:
    """The dashboard JSON as committed: stable key order, trailing newline."""
    data = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python dashboards/adk_task_telemetry.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
