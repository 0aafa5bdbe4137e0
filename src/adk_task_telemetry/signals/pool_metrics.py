"""How full ADK's tool thread pool is: three observable gauges, read at collection.

A synchronous tool that outlives its run (its caller timed out; a thread cannot be
cancelled) keeps its pool thread. When every thread is held, further synchronous
calls wait in the pool's queue: ``queued`` above zero is a saturated pool, and
``busy`` against ``max_workers`` shows it coming. The counts come from the pool
submissions adk_compat sees (no ADK internals are read at collection).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics

from .. import adk_compat as compat
from .. import semconv as sc
from ..version import __version__

_observed: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def observe(meter_provider: metrics.MeterProvider | None) -> None:
    """Registers the gauges once per Meter (the SDK keeps the callbacks of an
    instrument's first registration only). Nothing where ADK has no pool."""
    if not compat.HAS_TOOL_THREAD_POOL:
        return
    meter = metrics.get_meter(sc.SCOPE_NAME, __version__, meter_provider=meter_provider,
                              schema_url=sc.SCHEMA_URL)
    try:
        if _observed.get(meter):
            return
        _observed[meter] = True
    except TypeError:  # a meter that cannot be weakly referenced: register anyway
        pass
    meter.create_observable_gauge(
        sc.METRIC_POOL_BUSY, [_busy], sc.UNIT_THREAD,
        "ADK tool thread pool threads running a synchronous tool call now.")
    meter.create_observable_gauge(
        sc.METRIC_POOL_QUEUED, [_queued], sc.UNIT_CALL,
        "Synchronous tool calls waiting for a free ADK tool thread pool thread.")
    meter.create_observable_gauge(
        sc.METRIC_POOL_MAX_WORKERS, [_max_workers], sc.UNIT_THREAD,
        "Threads ADK's tool thread pools may run (their max_workers).")


def _gauge(value: Callable[[int, int], int]) -> Callable[[Any], list[metrics.Observation]]:
    """A gauge callback: one point, the sum over the pools seen; none before the
    first pool (a process that never uses one reports no pool series)."""
    def callback(_options: Any) -> list[metrics.Observation]:
        usage = compat.tool_pool_usage()
        return [metrics.Observation(sum(value(w, n) for w, n in usage))] if usage else []
    return callback


_busy = _gauge(lambda workers, inflight: min(inflight, workers))
_queued = _gauge(lambda workers, inflight: max(inflight - workers, 0))
_max_workers = _gauge(lambda workers, _inflight: workers)
