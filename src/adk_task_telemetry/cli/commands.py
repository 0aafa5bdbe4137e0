"""The three commands: run what was asked, hand the results to the views, print what
they return, and say the exit code. What is drawn here is small and of the command
itself: the in-place progress line of a scenario still running (a finished one's line is
the terminal view's), the sentences on stderr, and ``version``'s table."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

from . import harness, terminal
from .audit_json import audit_document
from .results import EXIT_FAILED, EXIT_OK, PROG, Result, UsageError, exit_code


class Progress:
    """Scenario progress on stderr, so stdout stays the drawing or the JSON."""

    def __init__(self, stream: TextIO, quiet: bool, style: terminal.Style) -> None:
        self.stream = stream
        self.quiet = quiet
        self.style = style

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def __call__(self, i: int, n: int, name: str, result: Result | None) -> None:
        if self.quiet:
            return
        if result is None:
            if self.stream.isatty():
                print(f"[{i:>{len(str(n))}}/{n}] {name} ...", end="\r", file=self.stream,
                      flush=True)
            return
        print(terminal.progress_line(i, n, name, result, self.style), file=self.stream,
              flush=True)


def _width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def _start(args: argparse.Namespace) -> tuple[list[str], TextIO, terminal.Style, Progress]:
    """What demo and audit share: the scenarios, stdout and its style, the progress line.
    ``args.color`` is the colour mode the dispatch resolved with the environment."""
    names = harness.select(args.scenario)
    harness.quiet_libraries(args.verbose)
    out = sys.stdout
    style = terminal.Style.for_stream(out, args.color)
    progress = Progress(sys.stderr, args.quiet,
                        terminal.Style.for_stream(sys.stderr, args.color))
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


def _write_html(path: str | None, results: Sequence[Result], code: int) -> None:
    """Writes the HTML report (after the run: the text output is already out)."""
    if path is None:
        return
    import datetime
    import shlex

    from .report_html import ReportInfo, render_report

    info = ReportInfo(command=shlex.join([PROG, *sys.argv[1:]]), versions=harness.versions(),
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
        from .demo_otlp import Export, check_endpoint, otlp_protocol

        endpoint = check_endpoint(args.otlp)
        export = Export(endpoint, otlp_protocol(endpoint, args.otlp_protocol))
    width = _width()
    progress.say(f"{PROG} demo: {len(names)} scenario{'s' if len(names) != 1 else ''} on "
                 f"google-adk {harness.versions()['google-adk']}, in-memory OpenTelemetry "
                 "SDK" + (f", also exporting to {args.otlp}" if export else ""))

    def draw(result: Result) -> None:
        print(terminal.demo_scenario(result, style, width), file=out)
        print(file=out, flush=True)

    try:
        results = asyncio.run(harness.run_all(names, progress, draw, export))
    finally:
        if export is not None:
            if export.close():
                progress.say(f"exported spans, metrics and logs to {args.otlp}")
            else:
                progress.say(f"could not export everything to {args.otlp} (see above)")
    print(terminal.demo_summary(results, style, harness.this_install()), file=out)
    code = EXIT_FAILED if any(r.verdict == "failed" for r in results) else EXIT_OK
    out.flush()
    _write_html(html_path, results, code)
    return code


def cmd_audit(args: argparse.Namespace) -> int:
    names, out, style, progress = _start(args)
    html_path = _html_path(args)
    progress.say(f"{PROG} audit: {len(names)} scenario{'s' if len(names) != 1 else ''} "
                 f"against google-adk {harness.versions()['google-adk']}")
    results = asyncio.run(harness.run_all(names, progress))
    code = exit_code(results)
    install = harness.this_install()
    if args.json:
        json.dump(audit_document(results, install), out, indent=2)
        out.write("\n")
    else:
        print(terminal.audit_report(results, style, install), file=out)
    out.flush()
    _write_html(html_path, results, code)
    return code


def cmd_version(args: argparse.Namespace) -> int:
    install = harness.this_install()
    versions = dict(install.versions)
    if args.json:
        doc = {**versions, "adk_issue_7058": "fixed"
               if install.adk_issue_7058_fixed else "present"}
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    width = max(len(k) for k in versions)
    for k, val in versions.items():
        extra = ""
        if k == "google-adk":
            extra = ("  (ADK issue 7058 fixed)" if install.adk_issue_7058_fixed
                     else "  (has ADK issue 7058: leaks streaming tool tasks)")
        elif k == "python":
            extra = f"  ({platform.python_implementation()}, {sys.platform})"
        print(f"{k:<{width}}  {val}{extra}")
    return EXIT_OK
