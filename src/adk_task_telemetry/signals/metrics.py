"""The contract's instruments, one attribute set ("series") per tool, and the cardinality cap.

``started`` and ``active`` are plain counts per series (``Series.started`` and
``Series.open``; ``Series`` is data held by the records, engine/records.py), changed
only by the tracker as a task enters OPEN (``enter``) and leaves it (``_leave``), and
read when a reader collects: a tool task costs no SDK measurement for either. Both are
observed once per Meter for every plugin on it.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from .. import semconv as sc
from ..engine.records import Series, ToolIdentity
from ..version import __version__

if TYPE_CHECKING:
    from ..engine.records import TaskRecord

logger = logging.getLogger(sc.LOGGER_NAME)

#: Attribute sets kept at most; beyond, the tool name becomes ``_other``.
MAX_SERIES = 2000
OTHER = "_other"
NAME_CHARS = 256


def end_attributes(attrs: dict[str, Any], outcome: str,
                   error_type: str | None = None) -> dict[str, Any]:
    """How a task ended, as the span and the duration and orphan-lifetime points all
    carry it, put into ``attrs`` (returned): ``adk.tool_task.outcome``, and
    ``error.type`` where one is known. The one place these two attributes are made."""
    attrs[sc.ADK_TOOL_TASK_OUTCOME] = outcome
    if error_type is not None:
        attrs[sc.ERROR_TYPE] = error_type
    return attrs


#: Measurements taken after their run's end (an orphan's end), every Metrics' together.
_outside_runs = 0


def measured_outside_runs() -> int:
    """How many measurements were taken outside any run so far: with the runs begun and
    alive, what a plugin's close reads to tell whether a metric changed since the last
    (every other measurement of ours is taken inside a run)."""
    return _outside_runs


#: Orphan measurements (reported at a run's end, or an orphan's end), every Metrics'.
_orphan_points = 0


def orphan_points() -> int:
    """How many orphan measurements were taken so far: a plugin's close collects
    metrics at once when this changed since the last (close_flush.Activity.alarms), not
    coalesced with other closes."""
    return _orphan_points


class Metrics:
    """Everything the tracker measures."""

    def __init__(self, meter_provider: metrics.MeterProvider | None) -> None:
        meter = metrics.get_meter(sc.SCOPE_NAME, __version__, meter_provider=meter_provider,
                                  schema_url=sc.SCHEMA_URL)
        self._series: dict[ToolIdentity, Series] = {}
        self._capped = False
        _observed_by(meter).users.add(self)
        self._duration = meter.create_histogram(
            sc.METRIC_DURATION, sc.UNIT_SECONDS,
            "Tool task lifetime, creation to end, for tasks that ended inside their run.",
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS))
        self._orphaned = meter.create_counter(
            sc.METRIC_ORPHANED, sc.UNIT_TASK, "Tool tasks still running when their run ended.")
        self._orphans_alive = meter.create_up_down_counter(
            sc.METRIC_ORPHANS_ALIVE, sc.UNIT_TASK, "Orphaned tool tasks still running.")
        self._orphan_lifetime = meter.create_histogram(
            sc.METRIC_ORPHAN_LIFETIME, sc.UNIT_SECONDS,
            "How long an orphaned tool task ran past the end of its run.",
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS))
        self._overflow = meter.create_counter(
            sc.METRIC_OVERFLOW, sc.UNIT_TASK,
            "Tool tasks not tracked because max_open_tasks records were open.")
        self._unanswered = meter.create_counter(
            sc.METRIC_UNANSWERED, sc.UNIT_CALL,
            "Function calls with no function response in the session when their run ended.")
        self._unanswered_tools: set[str] = set()
        self._overflowed = 0  # tool tasks not tracked (max_open_tasks), so far
        #: The records of tasks still running (the tracker's ``open_records``), read at
        #: collection for ``oldest_age``: a task costs nothing for it.
        self.running: Callable[[], Iterable[TaskRecord]] | None = None

    def series_for(self, identity: ToolIdentity) -> Series:
        """The attribute set of ``identity`` (the caller caches it: once per tool)."""
        series = self._series.get(identity)
        if series is None and len(self._series) >= MAX_SERIES:
            # A model that invents tool names (ADK answers "tool not found" with a
            # tool of that name) must not explode metric cardinality.
            if not self._capped:
                self._capped = True
                logger.warning("adk_task_telemetry: more than %d (tool, agent, kind, app) "
                               "combinations; further ones are counted as tool %r",
                               MAX_SERIES, OTHER)
            identity = ToolIdentity(OTHER, identity.tool_type, identity.agent_name,
                                    identity.kind, identity.app_name)
            series = self._series.get(identity)
        if series is None:
            attrs = {
                sc.GEN_AI_TOOL_NAME: identity.tool_name[:NAME_CHARS],
                sc.GEN_AI_AGENT_NAME: identity.agent_name[:NAME_CHARS],
                sc.ADK_TOOL_TASK_KIND: identity.kind,
                sc.ADK_APP_NAME: identity.app_name[:NAME_CHARS],
            }
            series = self._series[identity] = Series(
                attrs,
                # the span's start attributes this series shares (ids are added per task)
                {**attrs, sc.GEN_AI_TOOL_TYPE: identity.tool_type[:NAME_CHARS]},
                # the duration histogram's attributes of the outcomes that need no more
                {o: end_attributes({**attrs}, o) for o in (sc.Outcome.OK, sc.Outcome.RECOVERED)})
        return series

    # --- observable values (read on the reader's thread) ----------------------------

    def started_counts(self) -> list[tuple[dict[str, str], int]]:
        # list() copies in one step: the event loop may add a series meanwhile.
        return [(s.attrs, s.started) for s in list(self._series.values())]

    def active_counts(self) -> list[tuple[dict[str, str], int]]:
        return [(s.attrs, s.open) for s in list(self._series.values())]

    def oldest_ages(self) -> list[tuple[dict[str, str], float]]:
        """Per series, the age in seconds of its oldest task still running (in its run
        or orphaned), 0 where none runs: a gauge that drops to 0 rather than vanish, so
        that a store holding a series' last point a while (a Collector's Prometheus
        exporter) never repeats an old age. One pass over the running records."""
        now = time.time_ns()
        oldest = {id(s): (s.attrs, now) for s in list(self._series.values())}
        if self.running is not None:
            for record in self.running():
                found = oldest.get(id(record.series))
                if found is not None and record.start_ns < found[1]:
                    oldest[id(record.series)] = (found[0], record.start_ns)
        return [(attrs, max(now - start, 0) / 1e9) for attrs, start in oldest.values()]

    # --- measurements --------------------------------------------------------------

    def ended(self, series: Series, seconds: float, outcome: str, span: Span | None,
              error_type: str | None = None, cancel_cause: str | None = None) -> None:
        """The ``duration`` point of a task that ended inside its run; ``span`` None
        where none was made (no exemplar)."""
        attrs = series.by_outcome.get(outcome)
        if attrs is None:
            attrs = end_attributes({**series.attrs}, outcome, error_type)
            if cancel_cause is not None:
                attrs[sc.ADK_TOOL_TASK_CANCEL_CAUSE] = cancel_cause
        self._duration.record(seconds, attrs, context=_NO_EXEMPLAR if span is None
                              else _exemplar_context(span))

    def orphaned(self, series: Series, trigger: str, span: Span) -> None:
        global _orphan_points
        _orphan_points += 1
        self._orphaned.add(1, {**series.attrs, sc.ADK_RUN_END_TRIGGER: trigger},
                           context=_exemplar_context(span))
        self._orphans_alive.add(1, series.attrs)

    def orphan_ended(self, series: Series, seconds: float, outcome: str, span: Span) -> None:
        global _outside_runs, _orphan_points
        _outside_runs += 1
        _orphan_points += 1
        self._orphans_alive.add(-1, series.attrs)
        self._orphan_lifetime.record(seconds, end_attributes({**series.attrs}, outcome),
                                     context=_exemplar_context(span))

    def overflow(self, series: Series, open_now: int) -> None:
        """A tool task not tracked: ``open_now`` records were open (``max_open_tasks``).
        Counted, and logged at the first and every thousandth."""
        self._overflowed += 1
        self._overflow.add(1, series.attrs)
        if self._overflowed == 1 or self._overflowed % 1000 == 0:
            logger.warning("adk_task_telemetry: %d open tool tasks reached max_open_tasks; %d "
                           "tool tasks not tracked so far", open_now, self._overflowed)

    def unanswered(self, tool_name: str, agent_name: str, app_name: str, reason: str,
                   span: Span | None) -> None:
        """One unanswered call; the tool name under the same cap as the series (a
        call to a tool the model invented is unanswered too)."""
        tool_name = tool_name[:NAME_CHARS]
        if tool_name not in self._unanswered_tools:
            if len(self._unanswered_tools) >= MAX_SERIES:
                tool_name = OTHER
            else:
                self._unanswered_tools.add(tool_name)
        attrs = {sc.GEN_AI_TOOL_NAME: tool_name, sc.GEN_AI_AGENT_NAME: agent_name[:NAME_CHARS],
                 sc.ADK_APP_NAME: app_name[:NAME_CHARS],
                 sc.ADK_TOOL_CALL_UNANSWERED_REASON: reason}
        context = trace.set_span_in_context(span) if span is not None else None
        self._unanswered.add(1, attrs, context=context)


#: The context of a measurement that offers no exemplar: it holds no span (the SDK's
#: trace-based exemplar filter turns it down at its first look) and one value of ours,
#: which nothing reads. Not an empty Context: the SDK takes ``context or get_current()``,
#: and an empty one is falsy, so it would read the current context (ADK's span, in a
#: done-callback) and ask that span (about 5k instructions more a measurement).
_NO_EXEMPLAR = otel_context.set_value(
    otel_context.create_key("adk_task_telemetry.no_exemplar"), True, Context())


def _exemplar_context(span: Span) -> Context:
    """The span as the exemplar's context where it is sampled (it may have ended
    already); ``_NO_EXEMPLAR`` otherwise, not the current one (in a done-callback that
    is ADK's span), and no context to build."""
    if span.get_span_context().trace_flags.sampled:
        return trace.set_span_in_context(span)
    return _NO_EXEMPLAR


class _Observed:
    """The observable instruments of one Meter, shared by every plugin on it: the SDK
    keeps the callbacks of an instrument's first registration only, so a second plugin
    on the same MeterProvider would otherwise report no ``started`` or ``active``."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.users: weakref.WeakSet[Metrics] = weakref.WeakSet()
        meter.create_observable_counter(
            sc.METRIC_STARTED, [self._started], sc.UNIT_TASK, "Tool tasks created.")
        meter.create_observable_up_down_counter(
            sc.METRIC_ACTIVE, [self._active], sc.UNIT_TASK,
            "Tool tasks running inside their run.")
        meter.create_observable_gauge(
            sc.METRIC_OLDEST_AGE, [self._oldest], sc.UNIT_SECONDS,
            "Age of the oldest tool task still running (in its run or orphaned); 0 for none.")

    def _started(self, _options: Any) -> list[metrics.Observation]:
        return _summed(m.started_counts() for m in list(self.users))

    def _active(self, _options: Any) -> list[metrics.Observation]:
        return _summed(m.active_counts() for m in list(self.users))

    def _oldest(self, _options: Any) -> list[metrics.Observation]:
        oldest: dict[frozenset[tuple[str, str]], tuple[dict[str, str], float]] = {}
        for m in list(self.users):
            for attrs, age in m.oldest_ages():
                key = frozenset(attrs.items())
                prev = oldest.get(key)
                if prev is None or age > prev[1]:
                    oldest[key] = (attrs, age)
        return [metrics.Observation(age, attrs) for attrs, age in oldest.values()]


def _summed(parts: Iterable[list[tuple[dict[str, str], int]]]) -> list[metrics.Observation]:
    """One observation per attribute set (two plugins may count the same tool)."""
    total: dict[frozenset[tuple[str, str]], tuple[dict[str, str], int]] = {}
    for part in parts:
        for attrs, n in part:
            key = frozenset(attrs.items())
            prev = total.get(key)
            total[key] = (attrs, n + (prev[1] if prev else 0))
    return [metrics.Observation(n, attrs) for attrs, n in total.values()]


_observed: weakref.WeakKeyDictionary[Any, _Observed] = weakref.WeakKeyDictionary()


def _observed_by(meter: metrics.Meter) -> _Observed:
    try:
        found = _observed.get(meter)
        if found is None:
            found = _observed[meter] = _Observed(meter)
        return found
    except TypeError:  # a meter that cannot be weakly referenced: not shared
        return _Observed(meter)
