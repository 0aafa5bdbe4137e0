"""``adk-task-telemetry``: watch tool-task lifecycles and audit an ADK install.

``demo`` and ``audit`` run the scenario library through the real ADK Runner with
the plugin on an in-memory OpenTelemetry SDK (no collector, no key, no network)
and read what they draw or judge back from that SDK's span exporter and metric
reader: the same data a user's backend would get, not the plugin's own state.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import platform
import shutil
import sys
import textwrap
import time
import urllib.parse
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any, TextIO

from opentelemetry.sdk.trace import SpanProcessor as SpanProcessorBase

from . import _render as render
from . import adk_compat
from . import semconv as sc
from .version import __version__

PROG = "adk-task-telemetry"
SCHEMA = "adk-task-telemetry/audit/v1"
SEED_SCENARIO = "seed_bug"
#: Generous: the whole corpus takes about two seconds.
SCENARIO_TIMEOUT_S = 60.0

EXIT_OK = 0
EXIT_ORPHANED = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line we cannot act on: exit code 2."""


# --- running scenarios ---------------------------------------------------------


def _scenarios() -> dict[str, Any]:
    from .scenarios import SCENARIOS

    return SCENARIOS


def _in_corpus(scenario: Any) -> bool:
    """Whether a scenario is in the default set: the ADK audit corpus. Scenarios
    whose leak is the application's own (orphaned on every ADK version) run only
    when named."""
    return bool(getattr(scenario, "audit", True))


def _select(names: Sequence[str] | None) -> list[str]:
    """The scenarios to run: the named ones in the order given, or the audit
    corpus with the seed bug first (it is the one the project exists for)."""
    known = _scenarios()
    if not names:
        corpus = [n for n, s in known.items() if _in_corpus(s)]
        return sorted(corpus, key=lambda n: n != SEED_SCENARIO)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def _metric_totals(reader: Any) -> tuple[int, dict[str, int], int, int]:
    """(started, ended per outcome, orphaned, orphans alive) from one collection."""
    started = orphaned = alive = 0
    ended = dict.fromkeys(render.ENDED_OUTCOMES, 0)
    data = reader.get_metrics_data()
    for rm in getattr(data, "resource_metrics", None) or ():
        for sm in rm.scope_metrics:
            if sm.scope.name != sc.SCOPE_NAME:
                continue
            for m in sm.metrics:
                for dp in m.data.data_points:
                    if m.name == sc.METRIC_STARTED:
                        started += int(dp.value)
                    elif m.name == sc.METRIC_ORPHANED:
                        orphaned += int(dp.value)
                    elif m.name == sc.METRIC_ORPHANS_ALIVE:
                        alive += int(dp.value)
                    elif m.name == sc.METRIC_DURATION:
                        outcome = str((dp.attributes or {}).get(sc.ADK_TOOL_TASK_OUTCOME, ""))
                        ended[outcome] = ended.get(outcome, 0) + int(dp.count)
    return started, ended, orphaned, alive


def _tasks_from_spans(spans: Sequence[Any], pending: set[str],
                      probed: set[str]) -> list[render.Task]:
    """The ``tool_task`` spans of one run, with their ``orphaned_task`` events."""
    tasks = []
    for s in spans:
        if not s.name.startswith(sc.SPAN_NAME_PREFIX):
            continue
        a = s.attributes or {}
        call_id = str(a.get(sc.GEN_AI_TOOL_CALL_ID, ""))
        task = render.Task(
            call_id=call_id,
            tool=str(a.get(sc.GEN_AI_TOOL_NAME, s.name[len(sc.SPAN_NAME_PREFIX):])),
            kind=str(a.get(sc.ADK_TOOL_TASK_KIND, "")),
            outcome=str(a.get(sc.ADK_TOOL_TASK_OUTCOME, "")),
            start_ns=int(s.start_time or 0),
            end_ns=int(s.end_time or s.start_time or 0),
            invocation_id=str(a.get(sc.ADK_INVOCATION_ID, "")),
            error_type=str(a[sc.ERROR_TYPE]) if sc.ERROR_TYPE in a else None,
        )
        for e in s.events:
            ea = e.attributes or {}
            if e.name == "exception" and task.error_type is None:
                task.error_type = str(ea.get("exception.type", "")) or None
            elif e.name == sc.EVENT_CANCELLED:
                cause = ea.get(sc.ADK_TOOL_TASK_CANCEL_CAUSE)
                task.cancel_cause = str(cause) if cause else None
            elif e.name == sc.EVENT_ORPHANED_TASK:
                age = ea.get(sc.ADK_TOOL_TASK_AGE, 0.0)
                task.orphan = render.Orphan(
                    trigger=str(ea.get(sc.ADK_RUN_END_TRIGGER, "")),
                    age_s=float(age) if isinstance(age, (int, float)) else 0.0,
                    at_ns=int(e.timestamp),
                    stacktrace=str(ea.get(sc.CODE_STACKTRACE, "")),
                    still_running=(call_id in pending) if call_id in probed else None,
                )
        tasks.append(task)
    return tasks


def _unanswered_from_spans(spans: Sequence[Any]) -> list[render.Unanswered]:
    """The ``unanswered_call`` events of one run (on ADK's run span or on ours)."""
    out = []
    for s in spans:
        for e in s.events:
            if e.name == sc.EVENT_UNANSWERED_CALL:
                a = e.attributes or {}
                out.append(render.Unanswered(
                    call_id=str(a.get(sc.GEN_AI_TOOL_CALL_ID, "")),
                    tool=str(a.get(sc.GEN_AI_TOOL_NAME, "")),
                    reason=str(a.get(sc.ADK_TOOL_CALL_UNANSWERED_REASON, "")),
                    invocation_id=str(a.get(sc.ADK_INVOCATION_ID, ""))))
    return out


def _span_totals(tasks: Sequence[render.Task]) -> tuple[int, dict[str, int], int, int]:
    """The same totals as _metric_totals, from spans: for --otlp, where the metrics
    go to the exporter's reader and not to ours."""
    ended = dict.fromkeys(render.ENDED_OUTCOMES, 0)
    orphaned = alive = 0
    for t in tasks:
        if t.orphan is not None or t.outcome == sc.Outcome.ORPHANED:
            orphaned += 1
            alive += bool(t.orphan is not None and t.orphan.still_running)
        else:
            ended[t.outcome] = ended.get(t.outcome, 0) + 1
    return len(tasks), ended, orphaned, alive


async def _run_one(name: str, export: _Export | None = None) -> render.Result:
    """One scenario on a fresh in-memory SDK (or, with --otlp, on the exporting
    one, teed into memory); leftovers (real orphans) are cancelled only after the
    SDK was read, so the drawing shows them alive."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from .plugin import TaskTelemetryPlugin
    from .scenarios import run_scenario

    scenario = _scenarios()[name]
    exporter = InMemorySpanExporter()
    owned: list[Any] = []  # providers to shut down after this scenario
    reader: InMemoryMetricReader | None = None
    if export is None:
        tracer_provider, tee = _sdk_for_adk()
        reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[reader])
        owned = [meter_provider]
        plugin = TaskTelemetryPlugin(tracer_provider=tracer_provider,
                                     meter_provider=meter_provider)
    else:
        tee = export.tee
        plugin = export.plugin
    tee.target = exporter
    errors_before = plugin.internal_errors
    result = render.Result(name, scenario.summary, scenario.mode, 0.0)
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
        finished = exporter.get_finished_spans()
        result.tasks = _tasks_from_spans(finished, pending, probed)
        result.unanswered = _unanswered_from_spans(finished)
        result.started, result.ended, result.orphaned, result.orphans_alive = (
            _metric_totals(reader) if reader is not None else _span_totals(result.tasks))
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


ProgressFn = Callable[[int, int, str, "render.Result | None"], None]


_local: list[tuple[Any, _Tee]] = []  # the one in-memory SDK of this process


def _sdk_for_adk() -> tuple[Any, _Tee]:
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
        tee = _Tee()
        provider.add_span_processor(tee)
        _local.append((provider, tee))
    return _local[0]


async def _run_all(names: Sequence[str], progress: ProgressFn,
                   on_result: Callable[[render.Result], None] | None = None,
                   export: _Export | None = None) -> list[render.Result]:
    results = []
    for i, name in enumerate(names, start=1):
        progress(i, len(names), name, None)
        result = await _run_one(name, export)
        progress(i, len(names), name, result)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _quiet_libraries(verbose: bool) -> None:
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


class _Tee(SpanProcessorBase):
    """Hands every ended span of the exporting provider to the in-memory exporter of
    the scenario that runs now, so --otlp draws from the same SDK data it sends."""

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


class _Progress:
    """Scenario progress on stderr, so stdout stays the drawing or the JSON."""

    def __init__(self, stream: TextIO, quiet: bool, style: render.Style) -> None:
        self.stream = stream
        self.quiet = quiet
        self.style = style

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def __call__(self, i: int, n: int, name: str, result: render.Result | None) -> None:
        if self.quiet:
            return
        counter = f"[{i:>{len(str(n))}}/{n}]"
        if result is None:
            if self.stream.isatty():
                print(f"{counter} {name} ...", end="\r", file=self.stream, flush=True)
            return
        what = f"{result.started} task{'s' if result.started != 1 else ''}"
        if result.orphaned:
            what += ", " + self.style.paint(sc.Outcome.ORPHANED, f"{result.orphaned} orphaned")
        if result.unanswered:
            what += ", " + self.style.paint(sc.Outcome.CANCELLED,
                                            f"{len(result.unanswered)} unanswered")
        if result.failure:
            what += ", " + self.style.paint("failed", "failed: " + result.failure)
        print(f"{counter} {name:<22} {what}  ({result.wall_s:.2f} s)",
              file=self.stream, flush=True)


# --- OTLP export ---------------------------------------------------------------


_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")


def _check_endpoint(value: str) -> str:
    """A usable --otlp ENDPOINT (``http(s)://host[:port][/prefix]`` or ``host:port``),
    or a UsageError saying what is wrong with it: a typo must not turn into an
    export that silently fails for the whole demo."""
    endpoint = value.strip()
    if not endpoint:
        raise UsageError("--otlp: the endpoint is empty (e.g. http://localhost:4317)")
    if any(ch.isspace() for ch in endpoint):
        raise UsageError(f"--otlp: {value!r} contains whitespace")
    try:
        parts = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        port = parts.port
    except ValueError as e:
        raise UsageError(f"--otlp: {value!r} is not a URL ({e})") from None
    if "://" in endpoint and parts.scheme not in ("http", "https"):
        raise UsageError(f"--otlp: {value!r}: the scheme must be http or https")
    if not parts.hostname:
        raise UsageError(f"--otlp: {value!r} names no host (e.g. http://localhost:4317)")
    if port == 0:
        raise UsageError(f"--otlp: {value!r}: port 0 is not a port")
    if parts.path.rstrip("/").endswith(_SIGNAL_PATHS):
        raise UsageError(f"--otlp: {value!r} is one signal's URL; give the collector's "
                         "base URL (the /v1/... paths are added)")
    return endpoint


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def _otlp_protocol(endpoint: str, asked: str | None) -> str | None:
    """The protocol for --otlp: as asked, else as OTEL_* says, else gRPC for the
    conventional OTLP/gRPC port 4317 (OTLP's default, HTTP, otherwise)."""
    from .configure.settings import protocol_configured

    if asked or protocol_configured("traces"):
        return asked
    try:
        port = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}").port
    except ValueError:
        return None
    return "grpc" if port == 4317 else None


class _Export:
    """--otlp: the plugin on providers from configure_telemetry(), teed into memory."""

    def __init__(self, endpoint: str, protocol: str | None) -> None:
        try:
            configure = importlib.import_module(__package__ or "adk_task_telemetry"
                                                ).configure_telemetry
        except Exception as e:  # a broken install: say so in one line
            raise UsageError(
                "--otlp needs adk_task_telemetry.configure_telemetry and the OTLP exporters "
                f"adk-task-telemetry depends on (reinstall it): {_one_line(e)}") from None
        from .plugin import TaskTelemetryPlugin

        self.endpoint = endpoint
        try:
            self.handle = configure("adk-task-telemetry-demo", endpoint=endpoint,
                                    protocol=protocol)
        except ValueError as e:  # a malformed endpoint or protocol
            raise UsageError(f"--otlp: {' '.join(str(e).split())}") from None
        except ImportError as e:  # an exporter package missing or unimportable
            raise UsageError(f"--otlp: {' '.join(str(e).split())}") from None
        except Exception as e:  # an exporter that cannot even be built: a broken install
            raise UsageError(f"--otlp: cannot set up OTLP export to {endpoint} "
                             f"({_one_line(e)})") from None
        # Export problems (collector down) are worth a line on stderr.
        export_log = logging.getLogger(f"{sc.LOGGER_NAME}.export")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
        handler.setLevel(logging.WARNING)
        export_log.addHandler(handler)
        # One plugin, on the exporting providers, its spans teed into memory: what
        # is drawn is what is sent, and each orphan is logged once.
        from opentelemetry import trace

        tracer_provider = self.handle.tracer_provider or trace.get_tracer_provider()
        add = getattr(tracer_provider, "add_span_processor", None)
        if not callable(add):
            raise UsageError("--otlp: the installed tracer provider is not the OpenTelemetry "
                             "SDK's; cannot draw what it exports")
        self.tee = _Tee()
        add(self.tee)
        self.plugin = TaskTelemetryPlugin(
            tracer_provider=tracer_provider,
            meter_provider=getattr(self.handle, "meter_provider", None))

    def close(self) -> bool:
        """Flushes and shuts the exporters down; True when everything was sent."""
        ok = bool(self.handle.force_flush())
        self.handle.shutdown()
        return ok


# --- commands ------------------------------------------------------------------


def _width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def _legend(style: render.Style) -> str:
    parts = [style.paint(o, o if o != sc.Outcome.ORPHANED else "ORPHANED")
             for o in (*render.ENDED_OUTCOMES, sc.Outcome.ORPHANED)]
    return ("  bars: " + "  ".join(parts) + f"   {style.still * 3}{style.arrow} still running "
            "after its run ended")


def _start(args: argparse.Namespace) -> tuple[list[str], Any, render.Style, _Progress]:
    """What demo and audit share: the scenarios, stdout and its style, the progress line."""
    names = _select(args.scenario)
    _quiet_libraries(args.verbose)
    out = sys.stdout
    style = render.Style.for_stream(out, args.color)
    progress = _Progress(sys.stderr, args.quiet, render.Style.for_stream(sys.stderr, args.color))
    return names, out, style, progress


def _html_path(args: argparse.Namespace) -> str | None:
    """--html PATH, checked before anything runs: a typo in the directory must not
    cost a whole run (the write itself can still fail, and is reported then)."""
    path: str | None = args.html
    if path is None:
        return None
    if not path or path == "-":
        raise UsageError("--html: give a file path (the report is one HTML file)")
    if os.path.isdir(path):
        raise UsageError(f"--html: {path} is a directory; give a file path")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--html: cannot write {path}: no directory {parent}")
    return path


def _write_html(path: str | None, results: Sequence[render.Result], code: int) -> None:
    """Writes the HTML report (after the run: the text output is already out)."""
    if path is None:
        return
    import datetime
    import shlex

    from .report_html import ReportInfo, render_report

    info = ReportInfo(command=shlex.join([PROG, *sys.argv[1:]]), versions=_versions(),
                      generated=datetime.datetime.now(datetime.timezone.utc), exit_code=code)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(render_report(results, info))
    except OSError as e:
        raise UsageError(f"--html: cannot write {path}: {e.strerror or e}") from None
    print(f"{PROG}: HTML report written to {path}", file=sys.stderr, flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    names, out, style, progress = _start(args)
    html_path = _html_path(args)
    export = None
    if args.otlp is not None:
        endpoint = _check_endpoint(args.otlp)
        export = _Export(endpoint, _otlp_protocol(endpoint, args.otlp_protocol))
    width = _width()
    progress.say(f"{PROG} demo: {len(names)} scenario{'s' if len(names) != 1 else ''} on "
                 f"google-adk {adk_compat.ADK_VERSION_STRING}, in-memory OpenTelemetry SDK"
                 + (f", also exporting to {args.otlp}" if export else ""))

    def draw(result: render.Result) -> None:
        print(render.timeline(result, style, width), file=out)
        for line in render.unanswered_lines([result], style):
            print(line, file=out)
        print(file=out, flush=True)

    try:
        results = asyncio.run(_run_all(names, progress, draw, export))
    finally:
        if export is not None:
            if export.close():
                progress.say(f"exported spans, metrics and logs to {args.otlp}")
            else:
                progress.say(f"could not export everything to {args.otlp} (see above)")
    print(style.paint("bold", "Summary") + style.paint(
        "dim", f"  google-adk {adk_compat.ADK_VERSION_STRING}"), file=out)
    print(render.summary_table(results, style), file=out)
    print(_legend(style), file=out)
    orphans = sum(r.orphaned for r in results)
    if orphans:
        msg = (f"{orphans} tool task{' outlived its' if orphans == 1 else 's outlived their'}"
               " run")
        adk_leak = any(r.orphaned and _in_corpus(_scenarios()[r.name]) for r in results)
        if adk_leak and not adk_compat.HAS_BACKGROUND_TOOL_REGISTRY:
            msg += (f": google-adk {adk_compat.ADK_VERSION_STRING} has ADK issue 7058, "
                    f"fixed in {adk_compat.ISSUE_7058_FIXED_IN}")
        print("\n" + style.paint(sc.Outcome.ORPHANED, msg), file=out)
    else:
        print("\n" + style.paint("clean", "no orphaned tool tasks"), file=out)
    code = EXIT_FAILED if any(r.verdict == "failed" for r in results) else EXIT_OK
    out.flush()
    _write_html(html_path, results, code)
    return code


def _exit_code(results: Sequence[render.Result]) -> int:
    if any(r.orphaned for r in results):
        return EXIT_ORPHANED
    if any(r.verdict == "failed" for r in results):
        return EXIT_FAILED
    return EXIT_OK


def _versions() -> dict[str, str]:
    def v(dist: str) -> str:
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            return "not installed"

    return {
        "adk-task-telemetry": __version__,
        "google-adk": adk_compat.ADK_VERSION_STRING,
        "opentelemetry-api": v("opentelemetry-api"),
        "opentelemetry-sdk": v("opentelemetry-sdk"),
        "python": platform.python_version(),
    }


def audit_document(results: Sequence[render.Result]) -> dict[str, Any]:
    """The ``audit --json`` document (schema in docs/cli.md)."""
    code = _exit_code(results)
    verdict = {EXIT_OK: "clean", EXIT_ORPHANED: "orphaned"}.get(code, "failed")
    scenarios = []
    for r in results:
        scenarios.append({
            "name": r.name,
            "summary": r.summary,
            "mode": r.mode,
            "in_corpus": _in_corpus(_scenarios()[r.name]),
            "verdict": r.verdict,
            "started": r.started,
            "ended": {o: r.ended.get(o, 0) for o in render.ENDED_OUTCOMES},
            "orphaned": r.orphaned,
            "orphans_alive": r.orphans_alive,
            "unaccounted": r.unaccounted,
            "duration_s": round(r.wall_s, 4),
            "failure": r.failure,
            "plugin_internal_errors": r.plugin_errors,
            "orphans": [_orphan_json(t) for t in r.tasks if t.orphan is not None],
            "unanswered": [{"call_id": u.call_id, "tool": u.tool, "reason": u.reason,
                            "invocation_id": u.invocation_id} for u in r.unanswered],
            "tasks": [_task_json(t) for t in sorted(r.tasks, key=lambda t: t.start_ns)],
        })
    return {
        "schema": SCHEMA,
        "versions": _versions(),
        "verdict": verdict,
        "exit_code": code,
        "totals": {
            "scenarios": len(results),
            "scenarios_orphaned": sum(r.verdict == "orphaned" for r in results),
            "scenarios_failed": sum(r.verdict == "failed" for r in results),
            "started": sum(r.started for r in results),
            "ended": {o: sum(r.ended.get(o, 0) for r in results)
                      for o in render.ENDED_OUTCOMES},
            "orphaned": sum(r.orphaned for r in results),
            "unanswered": sum(len(r.unanswered) for r in results),
        },
        "scenarios": scenarios,
    }


def _task_json(t: render.Task) -> dict[str, Any]:
    return {"call_id": t.call_id, "tool": t.tool, "kind": t.kind, "outcome": t.outcome,
            "start_unix_nano": t.start_ns, "end_unix_nano": t.end_ns,
            "duration_s": round((t.end_ns - t.start_ns) / 1e9, 6),
            "error_type": t.error_type, "cancel_cause": t.cancel_cause}


def _orphan_json(t: render.Task) -> dict[str, Any]:
    assert t.orphan is not None
    frame = t.orphan.stuck_at
    return {"call_id": t.call_id, "tool": t.tool, "kind": t.kind,
            "invocation_id": t.invocation_id, "end_trigger": t.orphan.trigger,
            "age_s": t.orphan.age_s, "still_running": t.orphan.still_running,
            "stuck_at": None if frame is None else {
                "file": frame.file, "line": frame.line, "function": frame.func,
                "code": frame.code},
            "stacktrace": t.orphan.stacktrace}


def cmd_audit(args: argparse.Namespace) -> int:
    names, out, style, progress = _start(args)
    html_path = _html_path(args)
    progress.say(f"{PROG} audit: {len(names)} scenario{'s' if len(names) != 1 else ''} "
                 f"against google-adk {adk_compat.ADK_VERSION_STRING}")
    results = asyncio.run(_run_all(names, progress))
    code = _exit_code(results)
    if args.json:
        json.dump(audit_document(results), out, indent=2)
        out.write("\n")
        out.flush()
        _write_html(html_path, results, code)
        return code
    print(render.summary_table(results, style), file=out)
    lines = render.orphan_lines(results, style) + render.unanswered_lines(results, style)
    for r in results:
        if r.verdict == "failed":
            why = r.failure or f"{r.unaccounted} task(s) started but never ended"
            lines.append(f"  {style.paint('failed', 'failed')} {r.name}: {why}")
    if lines:
        print(file=out)
        print("\n".join(lines), file=out)
    orphans = sum(r.orphaned for r in results)
    n_orph = sum(r.verdict == "orphaned" for r in results)
    adk = f"google-adk {adk_compat.ADK_VERSION_STRING}"
    if code == EXIT_ORPHANED:
        verdict = style.paint(
            sc.Outcome.ORPHANED,
            f"FAIL: {orphans} orphaned tool task{'s' if orphans != 1 else ''} in {n_orph} of "
            f"{len(results)} scenarios on {adk}")
    elif code == EXIT_FAILED:
        verdict = style.paint("failed", f"ERROR: the audit could not complete on {adk}")
    else:
        verdict = style.paint("clean", f"PASS: no orphaned tool tasks in {len(results)} "
                                       f"scenarios on {adk}")
    print(f"\n{verdict}", file=out)
    guessed = adk_compat.decided_without_source()
    if guessed:
        print(style.paint("dim", f"note: google-adk is installed without source files; "
                                 f"{len(guessed)} feature probes answered from the "
                                 "release's recorded facts (docs/versions.md)"), file=out)
    unanswered = sum(len(r.unanswered) for r in results)
    if unanswered:
        print(style.paint("dim", f"note: {unanswered} function call"
                                 f"{'s' if unanswered != 1 else ''} left without a response "
                                 "(verdict UNANSWERED; the exit code counts orphans only)"),
              file=out)
    out.flush()
    _write_html(html_path, results, code)
    return code


def cmd_version(args: argparse.Namespace) -> int:
    versions = _versions()
    if args.json:
        doc = {**versions, "adk_issue_7058": "fixed"
               if adk_compat.HAS_BACKGROUND_TOOL_REGISTRY else "present"}
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    width = max(len(k) for k in versions)
    for k, val in versions.items():
        extra = ""
        if k == "google-adk":
            extra = ("  (ADK issue 7058 fixed)" if adk_compat.HAS_BACKGROUND_TOOL_REGISTRY
                     else "  (has ADK issue 7058: leaks streaming tool tasks)")
        elif k == "python":
            extra = f"  ({platform.python_implementation()}, {sys.platform})"
        print(f"{k:<{width}}  {val}{extra}")
    return EXIT_OK


# --- argument parsing ------------------------------------------------------------

_EXIT_CODES = """\
exit codes:
  0    audit: no tool task was orphaned; demo and version: they ran
  1    audit: at least one tool task was orphaned
  2    usage error (unknown command, option or scenario; a bad --otlp endpoint;
       --otlp where OTLP export cannot be set up: an OTLP exporter package missing
       or broken;
       an --html file that cannot be written)
  3    a scenario could not run, or a task started and was never accounted for
  130  interrupted (Ctrl-C)"""

_ENV = """\
environment:
  NO_COLOR   set to any non-empty value: never colour (wins over --color)
  TERM       dumb: never colour
  COLUMNS    width of the timeline (default: the terminal's, else 100)"""


def _scenario_list() -> str:
    lines = ["scenarios (* = only when named: the leak is the application's own):"]
    for name, sc_ in _scenarios().items():
        mark = " " if _in_corpus(sc_) else "*"
        lines.append(f" {mark}{name:<22}{sc_.summary}")
    return "\n".join(lines)


def _wrap(text: str) -> str:
    width = min(88, shutil.get_terminal_size((88, 24)).columns - 2)
    return textwrap.fill(text, max(40, width))


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=fmt,
        description=_wrap(
            "Watch ADK tool-task lifecycles and audit a google-adk install for tool tasks "
            "that outlive their run. Runs scripted agents through the real ADK Runner with "
            "TaskTelemetryPlugin on an in-memory OpenTelemetry SDK: no collector, no API "
            "key, no network."),
        epilog=f"examples:\n  {PROG} demo\n  {PROG} audit --json > audit.json\n"
               f"  {PROG} version\n\n{_EXIT_CODES}\n\n{_ENV}")
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {__version__} (google-adk "
                                f"{adk_compat.ADK_VERSION_STRING})")
    sub = parser.add_subparsers(dest="command", metavar="{demo,audit,version}")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-s", "--scenario", action="append", metavar="NAME",
                        help="run only this scenario (repeatable; default: the audit corpus, "
                             "seed_bug first)")
    common.add_argument("--color", "--colour", choices=("auto", "always", "never"),
                        default="auto",
                        help="colour: auto (only on a terminal), always, never; NO_COLOR "
                             "wins (default: auto)")
    common.add_argument("-q", "--quiet", action="store_true",
                        help="no progress lines on stderr")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="let ADK's and the plugin's own log records through to stderr")
    common.add_argument("--html", metavar="PATH",
                        help="also write a self-contained HTML report (timelines, orphans' "
                             "stacks, summary table) to PATH; stdout and the exit code stay "
                             "the same")

    demo = sub.add_parser(
        "demo", parents=[common], formatter_class=fmt,
        help="run the scenarios and draw each run's tool tasks as a timeline",
        description=_wrap(
            "Run the scenarios (seed_bug first) and draw, per run, one bar per tool task "
            "from its creation to its end, coloured by outcome; orphans are marked with "
            "their tool, call id and the line they are stuck on. Ends with a summary "
            "table. Colours: green ok, cyan recovered, red error, yellow cancelled, bold "
            "magenta ORPHANED. Exits 0 when it could run, orphans or not: gate on "
            "'audit'."),
        epilog=f"examples:\n  {PROG} demo\n  {PROG} demo --scenario seed_bug\n"
               f"  NO_COLOR=1 {PROG} demo -s seed_bug -s parallel_one_fails\n"
               f"  {PROG} demo --otlp http://localhost:4317    # also to Jaeger/Grafana\n\n"
               f"{_scenario_list()}\n\n{_EXIT_CODES}\n\n{_ENV}")
    demo.add_argument("--otlp", metavar="ENDPOINT",
                      help="also export the runs via OTLP (configure_telemetry) to ENDPOINT")
    demo.add_argument("--otlp-protocol", choices=("grpc", "http/protobuf"), default=None,
                      help="OTLP protocol for --otlp (default: OTEL_EXPORTER_OTLP_PROTOCOL, "
                           "else grpc for port 4317, else http/protobuf)")
    demo.set_defaults(func=cmd_demo)

    audit = sub.add_parser(
        "audit", parents=[common], formatter_class=fmt,
        help="run the lifecycle corpus against the installed google-adk; exit 1 on orphans",
        description=_wrap(
            "Run the lifecycle corpus against the installed google-adk and report, per "
            "scenario, tool tasks started, ended by outcome, orphaned, and a verdict. "
            "Exit 1 when any task was orphaned: put it in CI before upgrading ADK."),
        epilog=f"examples:\n  {PROG} audit\n  {PROG} audit --json | jq .verdict\n"
               f"  {PROG} audit --html audit-report.html    # also an HTML report\n"
               f"  {PROG} audit -q --scenario seed_bug && echo 'no leaks'\n\n"
               f"{_scenario_list()}\n\n{_EXIT_CODES}\n\n{_ENV}\n\n"
               "The --json document is described in docs/cli.md (schema "
               f"{SCHEMA!r}).")
    audit.add_argument("--json", action="store_true",
                       help="print one JSON document on stdout instead of the table")
    audit.set_defaults(func=cmd_audit)

    version = sub.add_parser(
        "version", formatter_class=fmt,
        help="print package, google-adk, OpenTelemetry and Python versions",
        description=_wrap(
            "Print the versions of adk-task-telemetry, google-adk, the OpenTelemetry API "
            "and SDK, and Python, and whether this google-adk has ADK issue 7058."),
        epilog=f"examples:\n  {PROG} version\n  {PROG} version --json")
    version.add_argument("--json", action="store_true", help="print a JSON object")
    version.set_defaults(func=cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adk-task-telemetry`` command; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        # A stack line or a tool name the terminal cannot encode must not crash us.
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="replace")
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except UsageError as e:
        parser.exit(EXIT_USAGE, f"{PROG}: error: {e}\n")
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `adk-task-telemetry demo | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
