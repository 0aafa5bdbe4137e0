"""What this package reads of OpenTelemetry that OpenTelemetry does not make public.

The one place for it, as ``adk_compat`` is for ADK: each read says why no public path
exists. Checked on opentelemetry-api/-sdk 1.37.0 (the lowest bound), 1.41.1, 1.42.1,
1.44.0 and 1.45.2 (the versions the project's test environments resolve).

- The API's stand-in providers (what ``get_*_provider()`` returns before anything was
  installed): public for traces (``trace.ProxyTracerProvider``); metrics and logs keep
  theirs private (``opentelemetry.metrics._internal._ProxyMeterProvider``,
  ``opentelemetry._logs._internal.ProxyLoggerProvider``), so those are known by class
  name, which has not changed in those versions.
- A metric exporter's temporality and aggregation preferences: ``MetricExporter`` takes
  them as arguments and keeps them only in ``_preferred_temporality`` and
  ``_preferred_aggregation``, which the SDK's own ``PeriodicExportingMetricReader``
  reads too. Ours mirror the OTLP exporter they hand batches to, which resolved
  ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`` itself.
- The context key the current span is kept under (``opentelemetry.trace.propagation.
  _SPAN_KEY``): ``trace.get_current_span(context)`` is the public read, and costs an
  ABC ``isinstance`` per call; a task of an unsampled trace reads its parent once at
  its end and needs nothing more (task_spans.py), so it reads the key directly and
  takes only the SDK's own ``NonRecordingSpan`` found there (anything else goes the
  public way).

Also here, as the one adapter of the OpenTelemetry SDK's types for the engine and the
signals (which otherwise stand on the API and work under whatever SDK the application
set up): whether an SDK sampler drops a child span, asked through its public
``should_sample`` (``sdk_sampler_drops``, for signals/task_spans.py). The SDK's sampling
module is imported only when asked, and a provider without the SDK's sampler kinds
answers "not known". Not here: ``signals/span_processors.py``'s ``OpenSpanProcessor``
is an SDK ``SpanProcessor`` by nature (it is added to an SDK provider), so that module
imports ``opentelemetry.sdk.trace`` itself; ``adk_compat`` reads ADK's source with
``inspect.getsource`` (ADK's, not OTel's).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation import _SPAN_KEY

#: Where ``trace.set_span_in_context`` keeps the span in a Context (see above).
SPAN_KEY: str = _SPAN_KEY

#: The private stand-ins of the metrics and logs APIs, by class name (leading ``_`` off).
_STAND_INS = frozenset({"ProxyMeterProvider", "ProxyLoggerProvider"})


def nobody_installed(provider: object) -> bool:
    """The API's stand-in that the first ``set_*_provider`` replaces: a provider can still
    be installed."""
    if isinstance(provider, trace.ProxyTracerProvider):
        return True
    return type(provider).__name__.lstrip("_") in _STAND_INS


def exporter_preferences(exporter: Any) -> tuple[Any, Any]:
    """``(preferred_temporality, preferred_aggregation)`` of a ``MetricExporter``, as the
    SDK's reader reads them."""
    return exporter._preferred_temporality, exporter._preferred_aggregation


def sdk_sampler_drops(sampler: object, parent: otel_context.Context, trace_id: int,
                      name: str, kind: trace.SpanKind) -> bool:
    """Whether ``sampler``, one of the SDK's deterministic kinds (``StaticSampler``:
    ALWAYS_ON/OFF; ``ParentBased``), drops a span ``name`` of ``kind`` under ``parent``.
    Any other sampler, or no SDK at all, is not known to: False (what it raises goes to
    the caller)."""
    try:
        from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler
    except ImportError:  # pragma: no cover - the SDK is a dependency; an app may strip it
        return False
    if not isinstance(sampler, (ParentBased, StaticSampler)):
        return False
    return sampler.should_sample(parent, trace_id, name, kind).decision is Decision.DROP
