"""``adk-task-telemetry tasks``: the tool tasks running now in live processes.

Reads the live view of each process's debug endpoint (``debug_endpoint``: opt-in,
``ADK_TASK_TELEMETRY_DEBUG_PORT``) over HTTP and prints, per process, every tool task
still running, oldest first: age, state, tool, call id, run, agent, and the line it
waits on. Given a port range (several uvicorn workers each took one port of it), every
port of the range is asked; ports where nothing listens are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from ..debug_endpoint import DEFAULT_HOST, PATH, parse_ports
from ..plugin_options import plugin_options
from .results import EXIT_OK, UsageError

SCHEMA = "adk-task-telemetry/tasks-cli/1"
EXIT_NONE_ANSWERED = 3
TIMEOUT_S = 5.0


def _urls(args: argparse.Namespace) -> list[str]:
    if args.url:
        return list(args.url)
    spec = args.port or plugin_options().debug_port
    if not spec:
        raise UsageError("no endpoint: give --port PORT|FIRST-LAST or --url, or set "
                         "ADK_TASK_TELEMETRY_DEBUG_PORT as the processes have it")
    try:
        ports = parse_ports(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if ports == [0]:
        raise UsageError("port 0 means any free port: give the port the process logged")
    return [f"http://{args.host}:{p}{PATH}" for p in ports]


def _fetch(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        doc: dict[str, Any] = json.loads(r.read())
    doc["url"] = url
    return doc


def cmd_tasks(args: argparse.Namespace) -> int:
    urls = _urls(args)
    processes: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    for url in urls:
        try:
            processes.append(_fetch(url))
        except (urllib.error.URLError, OSError, ValueError) as e:
            if len(urls) == 1:
                errors.append({"url": url, "error": str(getattr(e, "reason", e))})
    if args.json:
        print(json.dumps({"schema": SCHEMA, "processes": processes, "errors": errors},
                         indent=2))
    else:
        _print(processes, errors)
    if not processes:
        print(f"no live view answered at {', '.join(urls[:3])}"
              f"{' ...' if len(urls) > 3 else ''}", file=sys.stderr)
        return EXIT_NONE_ANSWERED
    return EXIT_OK


def _print(processes: list[dict[str, Any]], errors: list[dict[str, str]]) -> None:
    for doc in processes:
        tasks = doc.get("tasks", [])
        print(f"pid {doc.get('pid')}  {doc['url']}  {len(tasks)} tool task(s) running")
        for t in tasks:
            print(f"  {t['age_s']:>10.1f}s  {t['state']:<16} {t['tool']}  call {t['call_id']}"
                  f"  run {t['invocation_id']}  agent {t['agent']}")
            if t.get("trace_id"):
                print(f"      trace {t['trace_id']}"
                      + (f" span {t['span_id']}" if t.get("span_id") else ""))
            where = t.get("stuck_at")
            if where:
                print(f"      waits at {where['file']}:{where['line']} in {where['function']}")
                if where.get("code"):
                    print(f"        {where['code']}")
    for e in errors:
        print(f"{e['url']}: {e['error']}", file=sys.stderr)


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """The ``tasks`` subcommand, on dispatch's parser."""
    tasks = sub.add_parser(
        "tasks", formatter_class=fmt,
        help="list the tool tasks running now in live processes (their debug endpoint)",
        description="List every tool task running now in the processes whose debug "
                    "endpoint (ADK_TASK_TELEMETRY_DEBUG_PORT) is given: age, state "
                    "(running, cancel_requested, orphaned), tool, call id, run, agent, "
                    "trace, and the line each one waits on. Exit 3 when no endpoint "
                    "answered.",
        epilog="examples:\n  adk-task-telemetry tasks --port 8790\n"
               "  adk-task-telemetry tasks --port 8790-8799 --json   # uvicorn workers\n")
    tasks.add_argument("--port", metavar="PORT|FIRST-LAST",
                       help="the endpoint's port or range (default: "
                            "ADK_TASK_TELEMETRY_DEBUG_PORT)")
    tasks.add_argument("--host", default=DEFAULT_HOST,
                       help=f"the endpoint's host (default {DEFAULT_HOST})")
    tasks.add_argument("--url", action="append", metavar="URL",
                       help=f"a full URL of an endpoint (…{PATH}); repeatable")
    tasks.add_argument("--json", action="store_true", help="print one JSON document")
    tasks.set_defaults(func=cmd_tasks)
