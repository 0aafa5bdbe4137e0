"""The ``adk-task-telemetry`` command, run for real in a subprocess.

Each test runs in every ADK virtualenv (``make test``); what the CLI must report
depends on whether the installed google-adk has issue 7058 (before 2.13.0).
"""

from __future__ import annotations

import ast
import http.server
import json
import os
import platform
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import pytest

from adk_task_telemetry import __version__, adk_compat
from adk_task_telemetry.cli import main, terminal
from adk_task_telemetry.cli.dispatch import colour_mode
from adk_task_telemetry.cli.terminal import Style
from adk_task_telemetry.scenarios import SCENARIOS
from adk_task_telemetry.signals.stacks import innermost_user_frame

BUGGY = not adk_compat.HAS_BACKGROUND_TOOL_REGISTRY  # ADK issue 7058, fixed in 2.13
#: What audit and demo run by default (scenarios leaking on every ADK version only
#: when named).
CORPUS = [n for n, s in SCENARIOS.items() if getattr(s, "audit", True)]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CMD = [sys.executable, "-m", "adk_task_telemetry.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "TERM")}
    env.update({"COLUMNS": "110", "TERM": "xterm-256color", "PYTHONIOENCODING": "utf-8"})
    env.update(extra)
    return env


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120,
                          env=_env(**env), stdin=subprocess.DEVNULL)


def cli_in_pty(*args: str, **env: str) -> tuple[int, str]:
    """Runs with stdout on a pseudo-terminal: the CLI sees a TTY."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CMD, *args], stdout=slave, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=_env(**env))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


Proc = subprocess.CompletedProcess[str]

#: Every command the tests run, started together on first use (two at a time): most
#: of each run is importing ADK, so this keeps the module fast in each virtualenv.
COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "audit_json": (("audit", "--json"), {}),
    "audit_text": (("audit", "--scenario", "seed_bug", "-s", "single_call"), {}),
    "audit_app_leak": (("audit", "-q", "--json", "-s", "parallel_one_fails",
                        "-s", "live_stubborn_tool"), {}),
    "demo": (("demo", "-s", "seed_bug", "-s", "parallel_one_fails"), {}),
    "demo_ascii": (("demo", "-q", "--color", "always", "-s", "seed_bug"),
                   {"PYTHONIOENCODING": "ascii"}),
    "no_color_always": (("audit", "-q", "--color", "always", "-s", "single_call"),
                        {"NO_COLOR": "1"}),
    "unknown_scenario": (("audit", "--scenario", "no_such_scenario"), {}),
    "version": (("version",), {}),
}
PTY_COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "pty_colour": (("demo", "-q", "-s", "single_call"), {}),
    "pty_no_color": (("demo", "-q", "-s", "single_call"), {"NO_COLOR": "1"}),
    "pty_dumb": (("demo", "-q", "-s", "single_call"), {"TERM": "dumb"}),
}
if "live_stubborn_tool" not in SCENARIOS:
    del COMMANDS["audit_app_leak"]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Future[Any]]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: dict[str, Future[Any]] = {
            name: pool.submit(cli_in_pty, *args, **env)
            for name, (args, env) in PTY_COMMANDS.items()}
        futures.update({name: pool.submit(cli, *args, **env)
                        for name, (args, env) in COMMANDS.items()})
        yield futures


def run(runs: dict[str, Future[Any]], name: str) -> Proc:
    proc: Proc = runs[name].result(timeout=180)
    return proc


@pytest.fixture(scope="module")
def audit_json(runs: dict[str, Future[Any]]) -> tuple[int, dict[str, Any], str]:
    """The whole corpus: ``audit --json``."""
    proc = run(runs, "audit_json")
    return proc.returncode, json.loads(proc.stdout), proc.stderr


# --- audit -----------------------------------------------------------------------


def test_audit_json_exit_code_and_verdict(audit_json: tuple[int, dict[str, Any], str]) -> None:
    code, doc, _ = audit_json
    assert doc["schema"] == "adk-task-telemetry/audit/v1"
    assert doc["versions"]["google-adk"] == adk_compat.ADK_VERSION_STRING
    assert doc["versions"]["adk-task-telemetry"] == __version__
    assert doc["exit_code"] == code
    if BUGGY:
        assert code == 1
        assert doc["verdict"] == "orphaned"
        assert doc["totals"]["orphaned"] >= 1
    else:
        assert code == 0
        assert doc["verdict"] == "clean"
        assert doc["totals"]["orphaned"] == 0
        assert all(s["verdict"] in ("clean", "unanswered") for s in doc["scenarios"])
    # A scenario with calls left unanswered says so; the exit code counts orphans only.
    for s in doc["scenarios"]:
        if s["verdict"] in ("clean", "unanswered"):
            assert (s["verdict"] == "unanswered") == bool(s["unanswered"]), s["name"]
    assert doc["totals"]["unanswered"] == sum(len(s["unanswered"]) for s in doc["scenarios"])
    failed = {s["name"]: s for s in doc["scenarios"]}["parallel_one_fails"]
    assert "call-fail" in {u["call_id"] for u in failed["unanswered"]}


def test_audit_json_names_the_seed_orphan(audit_json: tuple[int, dict[str, Any], str]) -> None:
    _, doc, _ = audit_json
    seed = next(s for s in doc["scenarios"] if s["name"] == "seed_bug")
    if BUGGY:
        assert seed["verdict"] == "orphaned"
        orphan = next(o for o in seed["orphans"] if o["call_id"] == "call-goog")
        assert orphan["tool"] == "monitor_stock"
        assert orphan["kind"] == "streaming"
        assert orphan["still_running"] is True  # a real leak, not a late report
        assert orphan["stuck_at"]["function"] == "monitor_stock"
        assert orphan["stuck_at"]["file"].endswith("tools.py")
        assert "asyncio.sleep" in orphan["stuck_at"]["code"]
        assert orphan["end_trigger"]
    else:
        assert seed["verdict"] == "clean"
        assert seed["orphans"] == []
        assert seed["ended"]["cancelled"] == 2
    assert seed["started"] == 2


def test_audit_json_covers_the_corpus_consistently(
        audit_json: tuple[int, dict[str, Any], str]) -> None:
    _, doc, _ = audit_json
    names = [s["name"] for s in doc["scenarios"]]
    assert names[0] == "seed_bug"
    assert sorted(names) == sorted(CORPUS)
    for s in doc["scenarios"]:
        assert s["failure"] is None, s
        assert s["plugin_internal_errors"] == 0, s
        # Metrics (started/ended/orphaned) and spans (tasks) tell the same story.
        assert s["started"] == sum(s["ended"].values()) + s["orphaned"], s
        assert s["unaccounted"] == 0
        assert len(s["tasks"]) == s["started"], s
        assert len(s["orphans"]) == s["orphaned"], s
        assert sum(t["outcome"] == "orphaned" for t in s["tasks"]) == s["orphaned"]
        assert s["started"] >= 1, s
    totals = doc["totals"]
    assert totals["started"] == sum(s["started"] for s in doc["scenarios"])
    assert totals["scenarios"] == len(CORPUS)


def test_audit_progress_goes_to_stderr(audit_json: tuple[int, dict[str, Any], str]) -> None:
    _, _, stderr = audit_json
    n = len(CORPUS)
    assert f"[ 1/{n}] seed_bug" in stderr or f"[1/{n}] seed_bug" in stderr
    assert "single_call" in stderr


def test_audit_text_names_scenario_and_call_id(runs: dict[str, Future[Any]]) -> None:
    proc = run(runs, "audit_text")
    assert not ANSI.search(proc.stdout), "no colour when stdout is not a terminal"
    assert "seed_bug" in proc.stdout and "single_call" in proc.stdout
    assert "[1/2] seed_bug" in proc.stderr
    assert "[1/2]" not in proc.stdout
    if BUGGY:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "call-goog" in proc.stdout
        assert "ORPHANED" in proc.stdout
        assert "FAIL: 1 orphaned tool task" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "call-goog" not in proc.stdout
        assert "ORPHANED" not in proc.stdout
        assert "PASS: no orphaned tool tasks in 2 scenarios" in proc.stdout


def test_audit_fails_on_any_orphan_even_on_a_fixed_adk(runs: dict[str, Future[Any]]) -> None:
    """An application's own leak (a tool that ignores cancellation) fails the audit
    on every ADK version; a scenario beside it with no orphan is not called orphaned
    (its calls left without a response make it UNANSWERED)."""
    if "live_stubborn_tool" not in SCENARIOS:
        pytest.skip("scenario library has no live_stubborn_tool")
    proc = run(runs, "audit_app_leak")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""  # -q: no progress
    doc = json.loads(proc.stdout)
    clean, stubborn = doc["scenarios"]
    assert clean["verdict"] == "unanswered"
    assert clean["orphaned"] == 0
    assert sorted(u["call_id"] for u in clean["unanswered"]) == ["call-fail", "call-s1", "call-s2"]
    assert clean["ended"] == {"ok": 0, "recovered": 0, "error": 1, "cancelled": 2}
    assert sorted(t["cancel_cause"] or "" for t in clean["tasks"]) == [
        "", "sibling_failed", "sibling_failed"]
    assert stubborn["verdict"] == "orphaned"
    assert stubborn["in_corpus"] is False
    (orphan,) = stubborn["orphans"]
    assert orphan["call_id"] == "call-feed"
    assert orphan["still_running"] is True
    assert doc["verdict"] == "orphaned"


# --- demo ------------------------------------------------------------------------


def test_demo_draws_the_seed_orphan_or_none(runs: dict[str, Future[Any]]) -> None:
    proc = run(runs, "demo")
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert not ANSI.search(out)
    assert out.index("seed_bug") < out.index("parallel_one_fails")
    assert "━" in out  # bars
    assert "error ConnectionError" in out
    assert "cancelled · sibling_failed" in out
    assert "Summary" in out and "verdict" in out
    seed_block = out[:out.index("parallel_one_fails")]
    if BUGGY:
        assert "ORPHANED still running" in seed_block
        assert "! orphan monitor_stock call-goog (streaming)" in seed_block
        assert re.search(r"stuck at \S*tools\.py:\d+ in monitor_stock", seed_block)
        assert "await asyncio.sleep" in seed_block
        assert "1 tool task outlived its run" in out
    else:
        assert "ORPHANED" not in seed_block
        assert "orphan" not in seed_block
        assert seed_block.count("cancelled · run_teardown") == 2
        assert "no orphaned tool tasks" in out


def test_ascii_fallback_and_forced_colour_into_a_pipe(runs: dict[str, Future[Any]]) -> None:
    proc = run(runs, "demo_ascii")
    assert proc.returncode == 0, proc.stderr
    proc.stdout.encode("ascii")  # raises if anything is not ASCII
    assert "==" in proc.stdout
    assert ANSI.search(proc.stdout), "--color always paints into a pipe"
    if BUGGY:
        assert "....>" in proc.stdout


# --- colour ------------------------------------------------------------------------


def test_colour_on_a_terminal(runs: dict[str, Future[Any]]) -> None:
    code, out = runs["pty_colour"].result(timeout=180)
    assert code == 0
    assert "\x1b[32m" in out  # ok is green
    assert "single_call" in out


def test_no_colour_with_no_color_even_on_a_terminal(runs: dict[str, Future[Any]]) -> None:
    code, out = runs["pty_no_color"].result(timeout=180)
    assert code == 0
    assert "single_call" in out
    assert "\x1b[" not in out


def test_no_color_wins_over_color_always(runs: dict[str, Future[Any]]) -> None:
    proc = run(runs, "no_color_always")
    assert proc.returncode == 0
    assert "single_call" in proc.stdout
    assert not ANSI.search(proc.stdout)


def test_a_dumb_terminal_gets_no_colour(runs: dict[str, Future[Any]]) -> None:
    code, out = runs["pty_dumb"].result(timeout=180)
    assert code == 0
    assert "single_call" in out
    assert "\x1b[" not in out


def test_the_environment_is_read_once_by_the_dispatch() -> None:
    """NO_COLOR and TERM become the colour mode in the dispatch; the views take the
    mode as given (a view that read the environment itself would colour nothing here)."""
    assert colour_mode("always", {"NO_COLOR": "1"}) == "never"
    assert colour_mode("auto", {"TERM": "dumb"}) == "never"
    assert colour_mode("always", {"TERM": "dumb"}) == "always"
    assert colour_mode("auto", {"NO_COLOR": ""}) == "auto"  # empty: not set (no-color.org)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NO_COLOR", "1")
        env.setenv("TERM", "dumb")
        assert Style.for_stream(sys.stdout, "always").colour
    views = Path(terminal.__file__).parent
    for module in ("results", "wording", "terminal", "report_html", "audit_json"):
        tree = ast.parse((views / f"{module}.py").read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not names & {"os", "environ", "getenv"}, f"{module} reads the environment"


# --- usage, help, version ------------------------------------------------------------


def test_usage_error_exits_2(runs: dict[str, Future[Any]]) -> None:
    proc = run(runs, "unknown_scenario")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "unknown scenario 'no_such_scenario'" in proc.stderr
    assert "seed_bug" in proc.stderr  # says what exists


@pytest.mark.parametrize("args", [
    (),
    ("frobnicate",),
    ("audit", "--scenario", "no_such_scenario"),
    ("demo", "--no-such-flag"),
    ("demo", "--otlp-protocol", "carrier-pigeon"),
    ("audit", "--json", "extra"),
])
def test_every_usage_error_exits_2_before_running(
        args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(list(args)))
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage:" in captured.err or "error:" in captured.err


@pytest.mark.parametrize("endpoint", [
    "",                                    # empty: would silently run without export
    "not a url",
    "http://[::1",                         # unclosed IPv6 literal
    "http://collector:99999",              # port out of range
    "http://collector:0",
    "ftp://collector:4317",
    "://",
    "http://",                             # no host
    "http://collector:4318/v1/traces",     # one signal's URL, not the base URL
])
def test_a_bad_otlp_endpoint_exits_2_with_one_line(
        endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(["demo", "-q", "-s", "single_call", "--otlp", endpoint]))
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("adk-task-telemetry: error: --otlp"), lines


#: Python reports a module as unimportable when sys.modules holds None for it: this
#: is how a missing or broken exporter package looks to the CLI, at no other change.
_BLOCKED = ("import runpy, sys\n"
            "for name in sys.argv[1].split(','):\n"
            "    sys.modules[name] = None\n"
            "sys.argv = ['adk-task-telemetry', *sys.argv[2:]]\n"
            "runpy.run_module('adk_task_telemetry.cli', run_name='__main__')\n")


@pytest.mark.parametrize(("blocked", "protocol", "missing"), [
    ("opentelemetry.exporter.otlp.proto.grpc", "grpc", "opentelemetry.exporter.otlp.proto.grpc"),
    ("opentelemetry.exporter.otlp.proto.http", "http/protobuf",
     "opentelemetry.exporter.otlp.proto.http"),
    ("grpc", "grpc", "grpc"),
])
def test_otlp_on_a_broken_install_exits_2_with_one_line(
        blocked: str, protocol: str, missing: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED, blocked, "demo", "-q", "-s", "single_call",
         "--otlp", "http://127.0.0.1:4317", "--otlp-protocol", protocol],
        capture_output=True, text=True, timeout=120, env=_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("adk-task-telemetry: error: --otlp")
    assert "reinstall" in lines[0] and missing in lines[0]


@pytest.mark.parametrize("command", [None, "demo", "audit", "version"])
def test_every_command_has_help_with_examples(
        command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*([command] if command else []), "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"adk-task-telemetry {command or 'demo'}" in out
    if command != "version":
        assert "exit codes:" in out and "NO_COLOR" in out
    if command in ("demo", "audit"):
        assert "seed_bug" in out  # the scenarios are listed


def test_version(runs: dict[str, Future[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    proc = run(runs, "version")
    assert proc.returncode == 0
    out = proc.stdout
    assert re.search(rf"adk-task-telemetry\s+{re.escape(__version__)}", out)
    assert re.search(rf"google-adk\s+{re.escape(adk_compat.ADK_VERSION_STRING)}", out)
    assert re.search(rf"opentelemetry-sdk\s+{re.escape(dist_version('opentelemetry-sdk'))}", out)
    assert re.search(rf"python\s+{re.escape(platform.python_version())}", out)
    assert ("has ADK issue 7058" in out) == BUGGY
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(["version", "--json"]))
    assert exc.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["google-adk"] == adk_compat.ADK_VERSION_STRING
    assert doc["adk_issue_7058"] == ("present" if BUGGY else "fixed")


# --- --otlp --------------------------------------------------------------------------


class _Collector(http.server.BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP receiver: records which signals arrived."""

    paths: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[str]]]:
    paths: list[str] = []
    handler = type("Handler", (_Collector,), {"paths": paths})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()
    server.server_close()


def test_demo_otlp_exports_what_it_draws(collector: tuple[str, list[str]]) -> None:
    endpoint, paths = collector
    proc = cli("demo", "-s", "seed_bug", "--otlp", endpoint, "--otlp-protocol", "http/protobuf")
    assert proc.returncode == 0, proc.stderr
    assert f"exported spans, metrics and logs to {endpoint}" in proc.stderr
    assert "/v1/traces" in paths
    assert "/v1/metrics" in paths
    # The orphan's WARNING record is exported as a log, once the bug is there.
    assert ("/v1/logs" in paths) == BUGGY
    assert ("ORPHANED still running" in proc.stdout) == BUGGY


# --- where an orphan is stuck -----------------------------------------------------------


def test_innermost_user_frame_skips_asyncio_and_adk() -> None:
    stdlib = os.path.dirname(os.__file__)
    stack = (
        '  File "/venv/lib/python3.11/site-packages/google/adk/flows/x.py", line 9, in run\n'
        "    async for r in agen:\n"
        '  File "/app/tools.py", line 42, in watch\n'
        "    await asyncio.sleep(1)\n"
        f'  File "{stdlib}/asyncio/tasks.py", line 649, in sleep\n'
        "    return await future\n")
    frame = innermost_user_frame(stack)
    assert frame is not None
    assert (frame.file, frame.line, frame.func, frame.code) == (
        "/app/tools.py", 42, "watch", "await asyncio.sleep(1)")
    assert frame.where() == "/app/tools.py:42 in watch"
    assert innermost_user_frame("") is None
