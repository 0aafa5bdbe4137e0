"""The scenario harness: the scenario library on the real ADK Runner, with the plugin
on an in-memory OpenTelemetry SDK (or, with --otlp, on the exporting one, teed into
memory), one scenario at a time; what the SDK received becomes a ``Result``
(``readback``).
"""

from __future__ import annotations

import asyncio
import logging
import platform
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any, Protocol

from opentelemetry.sdk.trace import SpanProcessor as SpanProcessorBase

from .. import adk_compat as compat
from ..version import __version__
from . import readback
from .results import Install, Result, UsageError

SEED_SCENARIO = "seed_bug"
#: Generous: the whole corpus takes about two seconds.
SCENARIO_TIMEOUT_S = 60.0

ProgressFn = Callable[[int, int, str, "Result | None"], None]


def scenarios() -> dict[str, Any]:
    """The scenario library, by name (imported when first needed: it imports ADK)."""
    from ..scenarios import SCENARIOS

    return SCENARIOS


def in_corpus(scenario: Any) -> bool:
    """Whether a scenario is in the default set: the ADK audit corpus. Scenarios
    whose leak is the application's own (orphaned on every ADK version) run only
    when named."""
    return bool(getattr(scenario, "audit", True))


def select(names: Sequence[str] | None) -> list[str]:
    """The scenarios to run: the named ones in the order given, or the audit
    corpus with the seed bug first (it is the one the project exists for)."""
    known = scenarios()
    if not names:
        corpus = [n for n, s in known.items() if in_corpus(s)]
        return sorted(corpus, key=lambda n: n != SEED_SCENARIO)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def versions() -> dict[str, str]:
    """The versions ``version`` prints and the reports name."""
    def v(dist: str) -> str:
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            return "not installed"

    return {
        "adk-task-telemetry": __version__,
        "google-adk": compat.ADK_VERSION_STRING,
        "opentelemetry-api": v("opentelemetry-api"),
        "opentelemetry-sdk": v("opentelemetry-sdk"),
        "python": platform.python_version(),
    }


def this_install() -> Install:
    """The install the scenarios run on, as the views need it."""
    return Install(versions(), bool(compat.HAS_BACKGROUND_TOOL_REGISTRY),
                   len(compat.decided_without_source()), compat.ISSUE_7058_FIXED_IN)


class Tee(SpanProcessorBase):
    """Hands every ended span of the provider it is on to the in-memory exporter of the
    scenario that runs now, so what is drawn is what that provider exports."""

    def __init__(self) -> None:
        self.target: Any = None

    def on_end(self, span: Any) -> None:
        target = self.target
        if target is not None:
            target.export([span])

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # The SDK's base class returns None here before 1.42, which the provider
        # reads as a failed flush.
        return True


class Exporting(Protocol):
    """--otlp: the plugin on the exporting providers, and the tee on them (``otlp.Export``)."""

    tee: Tee
    plugin: Any


_local: list[tuple[Any, Tee]] = []  # the one in-memory SDK of this process


def sdk_for_adk() -> tuple[Any, Tee]:
    """One SDK TracerProvider for ADK and the plugin, set as the global one (ADK
    traces with that), teed into the scenario's in-memory exporter: the plugin sees
    the end of ADK's run span, as it does wherever ``configure_telemetry()`` ran (on
    ADK 1.x the only end signal of a run that failed or that its caller left), and
    what it puts on ADK's span (``unanswered_call``) is read back like the rest."""
    if not _local:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        tee = Tee()
        provider.add_span_processor(tee)
        _local.append((provider, tee))
    return _local[0]


async def run_one(name: str, export: Exporting | None = None) -> Result:
    """One scenario on a fresh in-memory SDK (or, with --otlp, on the exporting
    one, teed into memory); leftovers (real orphans) are cancelled only after the
    SDK was read, so the drawing shows them alive."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ..plugin import TaskTelemetryPlugin
    from ..scenarios import run_scenario
    from ..scenarios.library import PLUGIN_OPTIONS

    scenario = scenarios()[name]
    exporter = InMemorySpanExporter()
    owned: list[Any] = []  # providers to shut down after this scenario
    reader: InMemoryMetricReader | None = None
    if export is None:
        tracer_provider, tee = sdk_for_adk()
        reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[reader])
        owned = [meter_provider]
        plugin = TaskTelemetryPlugin(tracer_provider=tracer_provider,
                                     meter_provider=meter_provider,
                                     **PLUGIN_OPTIONS.get(name, {}))
    else:
        tee = export.tee
        plugin = export.plugin
    tee.target = exporter
    errors_before = plugin.internal_errors
    result = Result(name, scenario.summary, scenario.mode, 0.0, in_corpus=in_corpus(scenario))
    t0 = time.perf_counter()
    run = None
    try:
        run = await asyncio.wait_for(run_scenario(name, [plugin]), SCENARIO_TIMEOUT_S)
    except asyncio.TimeoutError:
        result.failure = f"did not finish within {SCENARIO_TIMEOUT_S:.0f} s"
    except Exception as e:  # report it, run the rest
        result.failure = f"{type(e).__name__}: {e}"
    result.wall_s = time.perf_counter() - t0
    try:
        probed = set(run.probe.tasks) if run is not None else set()
        pending = set(run.probe.pending()) if run is not None else set()
        readback.fill(result, exporter.get_finished_spans(), reader, pending, probed)
        result.plugin_errors = plugin.internal_errors - errors_before
        result.failure = result.failure or unseen_calls(
            sorted(c for c in probed if "/" not in c), result.started)
    finally:
        if run is not None:
            await run.probe.cleanup()
        tee.target = None
        for provider in owned:
            provider.shutdown()
    return result


def unseen_calls(calls_ran: Sequence[str], started: int) -> str | None:
    """Why a scenario fails when its tools ran calls (by their own record,
    ``calls_ran``: call ids) and the plugin saw no tool task start: a plugin blind on
    this install (a probe answered wrong, a hook not in place) would otherwise pass
    as CLEAN having watched nothing. None when there is nothing to say."""
    if not calls_ran or started:
        return None
    shown = ", ".join(calls_ran[:3]) + (", ..." if len(calls_ran) > 3 else "")
    return (f"the plugin saw no tool task, though the scenario's tools ran "
            f"{len(calls_ran)} call{'s' if len(calls_ran) != 1 else ''} ({shown}): "
            "it cannot watch tool tasks on this install")


async def run_all(names: Sequence[str], progress: ProgressFn,
                  on_result: Callable[[Result], None] | None = None,
                  export: Exporting | None = None) -> list[Result]:
    """The scenarios one after another; ``progress`` before and after each, then
    ``on_result`` (the demo draws each run as soon as it is read back)."""
    results = []
    for i, name in enumerate(names, start=1):
        progress(i, len(names), name, None)
        result = await run_one(name, export)
        progress(i, len(names), name, result)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def quiet_libraries(verbose: bool) -> None:
    """ADK logs every scripted error and warns about experimental features; the
    plugin logs each orphan. The CLI draws all of that itself, so stderr stays for
    progress unless --verbose. Only output is silenced: no logger's level of ours
    changes, so configure_telemetry() still exports the orphan log records."""
    if verbose:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
        return
    logging.getLogger().addHandler(logging.NullHandler())  # no "last resort" printing
    for name in ("google_adk", "google"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    warnings.filterwarnings("ignore", module=r"google\..*")
    warnings.filterwarnings("ignore", category=UserWarning, message=r".*EXPERIMENTAL.*")
