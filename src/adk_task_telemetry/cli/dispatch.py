"""``adk-task-telemetry``: the command line, parsed and dispatched.

``demo`` and ``audit`` run the scenario library through the real ADK Runner with
the plugin on an in-memory OpenTelemetry SDK (no collector, no key, no network)
and read what they draw or judge back from that SDK's span exporter and metric
reader: the same data a user's backend would get, not the plugin's own state.

The terminal conventions ``NO_COLOR`` and ``TERM`` are read here and nowhere else of
ours, and reach the views folded into the colour mode (``colour_mode``); the width
(``COLUMNS`` or the terminal's) is the standard library's ``shutil.get_terminal_size``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from collections.abc import Mapping, Sequence

from .. import adk_compat as compat
from ..version import __version__
from . import commands, harness, tasks
from .audit_json import SCHEMA
from .results import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, UsageError


def colour_mode(asked: str, environ: Mapping[str, str]) -> str:
    """The colour mode the views get: ``NO_COLOR`` set to anything non-empty means
    ``never`` whatever was asked (no-color.org); ``TERM=dumb`` turns ``auto`` off."""
    from .. import variables  # here: `version` and `--help` need no configure

    if environ.get(variables.NO_COLOR):
        return "never"
    if asked == "auto" and environ.get(variables.TERM) == "dumb":
        return "never"
    return asked


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
  TERM       dumb: no colour unless --color always
  COLUMNS    width of the timeline (default: the terminal's, else 100)"""


def _scenario_list() -> str:
    lines = ["scenarios (* = only when named: the leak is the application's own):"]
    for name, sc_ in harness.scenarios().items():
        mark = " " if harness.in_corpus(sc_) else "*"
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
                                f"{compat.ADK_VERSION_STRING})")
    sub = parser.add_subparsers(dest="command", metavar="{demo,audit,tasks,version}")

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
    demo.set_defaults(func=commands.cmd_demo)

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
    audit.set_defaults(func=commands.cmd_audit)

    tasks.add_parser(sub, fmt)

    version = sub.add_parser(
        "version", formatter_class=fmt,
        help="print package, google-adk, OpenTelemetry and Python versions",
        description=_wrap(
            "Print the versions of adk-task-telemetry, google-adk, the OpenTelemetry API "
            "and SDK, and Python, and whether this google-adk has ADK issue 7058."),
        epilog=f"examples:\n  {PROG} version\n  {PROG} version --json")
    version.add_argument("--json", action="store_true", help="print a JSON object")
    version.set_defaults(func=commands.cmd_version)
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
    if hasattr(args, "color"):
        args.color = colour_mode(args.color, os.environ)
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

