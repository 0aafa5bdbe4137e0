"""``demo/audit --html PATH``: the report the real CLI writes, rendered in a real browser.

The CLI runs in a subprocess (scenarios through the real ADK Runner, scripted model);
headless Chromium (Debian's ``chromium``) loads the file it wrote, and the tests read
the rendered DOM and its layout over the DevTools protocol: what the page shows is
compared with the ``audit --json`` document of the same run, or with the text output
of the same demo, never with hard-coded timings. Chromium also reports every request
the page made: a report that fetched anything would not be self-contained.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from adk_task_telemetry import adk_compat
from adk_task_telemetry.cli import results as model
from adk_task_telemetry.cli.report_html import MIN_BAR_PCT, ReportInfo, render_report
from adk_task_telemetry.signals.stacks import display_path, parse_frames

from .conftest import has_seed_bug
from .deploy_helpers import require_tool

CMD = [sys.executable, "-m", "adk_task_telemetry.cli"]
#: This machine's network is closed: without the background-networking flags
#: Chromium stalls on its own update and sync requests.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
VIEWPORT = (1280, 900)


def _chromium_binary() -> str:
    return require_tool("chromium")


class Chromium:
    """One headless Chromium, driven over the DevTools protocol (flat sessions)."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.log = (profile.parent / "chromium.log").open("w")
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                pytest.fail(f"Chromium did not start its DevTools endpoint (log: {self.log.name})",
                            pytrace=False)
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws: ClientConnection = connect(f"ws://127.0.0.1:{port}{path}", max_size=None)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method and e.get("sessionId") == session
                      for e in self.events):
            self.events.append(json.loads(
                self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))))

    def load(self, url: str) -> Page:
        """Opens ``url`` in a new tab at VIEWPORT, recording its network requests."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1,
                   "mobile": False}, session)
        self.send("Network.enable", {}, session)
        self.send("Page.enable", {}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)
        return Page(self, session)

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


class Page:
    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    def eval(self, expression: str) -> Any:
        reply = self.browser.send("Runtime.evaluate",
                                  {"expression": expression, "returnByValue": True},
                                  self.session)
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return reply["result"].get("value")

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("sessionId") == self.session
                and e.get("method") == "Network.requestWillBeSent"]


#: Everything the tests read from a rendered report, with layout in CSS pixels.
READ_REPORT_JS = r"""
(() => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                      return {left: r.left, right: r.right, width: r.width, height: r.height}; };
  const text = el => el ? el.textContent.replace(/\s+/g, ' ').trim() : null;
  const scenarios = [...document.querySelectorAll('section.scenario')].map(sec => ({
    name: sec.dataset.scenario, verdict: sec.dataset.verdict,
    heading: text(sec.querySelector('h3')),
    failure: text(sec.querySelector('.failure')),
    tasks: [...sec.querySelectorAll('tr.task')].map(tr => ({
      call_id: tr.dataset.callId, tool: tr.dataset.tool, outcome: tr.dataset.outcome,
      cells: [...tr.cells].map(text),
      title: text(tr.querySelector('svg.lane > title')),
      lane: box(tr.querySelector('svg.lane')), bar: box(tr.querySelector('rect.bar')),
      bar_fill: getComputedStyle(tr.querySelector('rect.bar')).fill,
      tail: box(tr.querySelector('line.tail')), arrow: box(tr.querySelector('svg.arrow polygon')),
      run_end: box(tr.querySelector('line.run-end')),
      label_colour: getComputedStyle(tr.cells[4]).color,
    })),
    orphans: [...sec.querySelectorAll('.orphan')].map(o => ({
      call_id: o.dataset.callId, text: text(o),
      stuck: [...o.querySelectorAll('mark.stuck')].map(m => m.textContent),
      stuck_file: [...o.querySelectorAll('mark.stuck span.frame')].map(f => f.dataset.file),
      frame_files: [...o.querySelectorAll('pre.stack span.frame')].map(f => f.dataset.file),
      stack: o.querySelector('pre.stack') ? o.querySelector('pre.stack').textContent : null})),
    unanswered: [...sec.querySelectorAll('table.unanswered tbody tr')].map(
      tr => [...tr.cells].map(text)),
  }));
  const summary = document.querySelector('table.summary');
  return {
    scenarios,
    summary_head: [...summary.tHead.rows[0].cells].map(text),
    summary_rows: [...summary.tBodies[0].rows].map(tr => [...tr.cells].map(text)),
    summary_total: [...summary.tFoot.rows[0].cells].map(text),
    meta: Object.fromEntries([...document.querySelectorAll('dl.meta dt')].map(
      dt => [text(dt), text(dt.nextElementSibling)])),
    scripts: document.scripts.length,
    body_background: getComputedStyle(document.body).backgroundColor,
  };
})()
"""


# --- running the CLI ---------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "TERM")}
    env.update({"COLUMNS": "110", "PYTHONIOENCODING": "utf-8"})
    return env


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=180,
                          env=_env(), stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def out_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="html-report-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def runs(out_dir: Path) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Every CLI run of this module, started together (two at a time)."""
    commands = {
        # The whole corpus, the JSON document and the report from the same run.
        "audit": ("audit", "--json", "--html", str(out_dir / "audit.html")),
        "demo": ("demo", "-s", "seed_bug", "-s", "parallel_one_fails", "-s", "recovered_error",
                 "--html", str(out_dir / "demo.html")),
        # The path is checked before anything runs ...
        "no_dir": ("audit", "-s", "single_call", "--html",
                   str(out_dir / "no" / "such" / "dir" / "r.html")),
        "a_dir": ("demo", "-s", "single_call", "--html", str(out_dir)),
        # ... and a write that fails after the run is reported the same way.
        "name_too_long": ("audit", "-q", "-s", "single_call", "--html",
                          str(out_dir / ("r" * 300 + ".html"))),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(cli, *args) for name, args in commands.items()}


def _run(runs: dict[str, Future[subprocess.CompletedProcess[str]]],
         name: str) -> subprocess.CompletedProcess[str]:
    return runs[name].result(timeout=240)


@pytest.fixture(scope="module")
def browser(out_dir: Path) -> Iterator[Chromium]:
    binary = _chromium_binary()
    profile = out_dir / "chromium-profile"
    profile.mkdir()
    chromium = Chromium(binary, profile)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture(scope="module")
def audit(runs: dict[str, Future[subprocess.CompletedProcess[str]]], out_dir: Path,
          browser: Chromium) -> tuple[subprocess.CompletedProcess[str], dict[str, Any],
                                      dict[str, Any], Page]:
    """The audit run: its process, JSON document, the rendered report and its page."""
    proc = _run(runs, "audit")
    doc = json.loads(proc.stdout)
    page = browser.load((out_dir / "audit.html").as_uri())
    return proc, doc, page.eval(READ_REPORT_JS), page


def _contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two computed CSS ``rgb(...)`` colours."""
    def lum(css: str) -> float:
        r, g, b = (int(x) / 255 for x in re.findall(r"\d+", css)[:3])
        return sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                   for w, c in zip((0.2126, 0.7152, 0.0722), (r, g, b), strict=True))
    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# --- the audit report against the JSON document of the same run --------------------------


def test_one_bar_per_tool_task_span_with_its_outcome(audit: Any) -> None:
    _, doc, report, _ = audit
    assert [s["name"] for s in report["scenarios"]] == [s["name"] for s in doc["scenarios"]]
    for want, got in zip(doc["scenarios"], report["scenarios"], strict=True):
        assert got["verdict"] == want["verdict"]
        assert want["verdict"].upper() in got["heading"]
        tasks = sorted(want["tasks"], key=lambda t: (t["start_unix_nano"], t["call_id"]))
        assert [(t["call_id"], t["tool"], t["outcome"]) for t in got["tasks"]] == [
            (t["call_id"], t["tool"], t["outcome"]) for t in tasks], want["name"]
        for t, row in zip(tasks, got["tasks"], strict=True):
            tool, call_id, kind, _, label = row["cells"]
            assert (tool, call_id, kind) == (t["tool"], t["call_id"], t["kind"])
            # The outcome is written out, with its detail, not only coloured.
            word = "ORPHANED" if t["outcome"] == "orphaned" else t["outcome"]
            assert label.startswith(word), (want["name"], row)
            for detail in (t["cancel_cause"], t["error_type"]):
                if detail:
                    assert detail.rsplit(".", 1)[-1] in label
            # Each bar is drawn, inside its lane, and titled for a screen reader.
            assert row["bar"]["width"] > 0 and row["bar"]["height"] > 0, row
            assert row["lane"]["left"] - 0.5 <= row["bar"]["left"]
            assert row["bar"]["right"] <= row["lane"]["right"] + 0.5
            assert t["call_id"] in row["title"] and label in row["title"]
            assert row["bar_fill"] not in ("none", "rgba(0, 0, 0, 0)")
            assert _contrast(row["label_colour"], report["body_background"]) >= 4.5, row


def test_bars_sit_on_their_runs_time_axis(audit: Any) -> None:
    """Within a run, a task created later starts further right, and one that ended
    later ends further right: the bars share one axis per run."""
    _, doc, report, _ = audit
    for want, got in zip(doc["scenarios"], report["scenarios"], strict=True):
        by_call = {r["call_id"]: r for r in got["tasks"]}
        # A bar too short to see is widened (and kept inside the lane): its edges are
        # not its times.
        drawn = [t for t in want["tasks"] if by_call[t["call_id"]]["bar"]["width"]
                 > MIN_BAR_PCT / 100 * by_call[t["call_id"]]["lane"]["width"] + 1]
        done = [t for t in drawn if t["outcome"] != "orphaned"]
        for a in drawn:
            for b in drawn:
                if a["start_unix_nano"] < b["start_unix_nano"]:
                    assert by_call[a["call_id"]]["bar"]["left"] <= by_call[b["call_id"]]["bar"][
                        "left"] + 0.5, want["name"]
        for a in done:
            for b in done:
                if a["end_unix_nano"] < b["end_unix_nano"]:
                    assert by_call[a["call_id"]]["bar"]["right"] <= by_call[b["call_id"]][
                        "bar"]["right"] + 0.5, want["name"]


def test_the_seed_orphan_has_a_tail_past_its_runs_end(audit: Any) -> None:
    _, doc, report, _ = audit
    seed = next(s for s in report["scenarios"] if s["name"] == "seed_bug")
    orphan_rows = [r for s in report["scenarios"] for r in s["tasks"] if r["tail"]]
    if not has_seed_bug():
        assert not orphan_rows, "no orphan on a fixed google-adk"
        assert all(s["orphans"] == [] for s in report["scenarios"])
        assert [r["outcome"] for r in seed["tasks"]] == ["cancelled", "cancelled"]
        return
    (json_orphan,) = next(s for s in doc["scenarios"] if s["name"] == "seed_bug")["orphans"]
    row = next(r for r in seed["tasks"] if r["call_id"] == json_orphan["call_id"])
    assert row["outcome"] == "orphaned"
    assert json_orphan["still_running"] is True
    # The solid bar stops where its run ended; the tail goes on to the axis's end,
    # where an arrow says the task is still running.
    assert abs(row["run_end"]["left"] - row["bar"]["right"]) <= 1.5, row
    assert row["tail"]["width"] > 20, row
    assert row["tail"]["left"] <= row["bar"]["right"] + 1
    assert row["tail"]["right"] > row["bar"]["right"] + 20
    assert row["arrow"] is not None
    assert abs(row["arrow"]["right"] - row["lane"]["right"]) <= 1.5, row
    assert "ORPHANED still running" in row["cells"][4]
    for other in seed["tasks"]:
        if other is not row:  # everything else ended inside the run, before the tail
            assert other["tail"] is None and other["arrow"] is None
            assert other["bar"]["right"] <= row["tail"]["right"]


def test_the_orphans_stack_marks_where_it_is_stuck(audit: Any) -> None:
    _, doc, report, _ = audit
    for want, got in zip(doc["scenarios"], report["scenarios"], strict=True):
        assert [o["call_id"] for o in got["orphans"]] == [o["call_id"] for o in want["orphans"]]
        for jo, ho in zip(want["orphans"], got["orphans"], strict=True):
            assert jo["end_trigger"] in ho["text"]
            _assert_same_stack(ho["stack"], jo["stacktrace"])
            assert ho["frame_files"] == [f.file for f in parse_frames(jo["stacktrace"])]
            frame = jo["stuck_at"]
            assert frame is not None
            mark, code = ho["stuck"]  # the frame's line and its source line
            assert ho["stuck_file"] == [frame["file"]]
            assert mark.endswith(f'", line {frame["line"]}, in {frame["function"]}')
            assert code.strip() == frame["code"]
            assert f':{frame["line"]} in {frame["function"]}' in ho["text"]  # "Stuck at ..."
    if has_seed_bug():
        assert any(s["orphans"] for s in report["scenarios"]), "the seed orphan is shown"


def _assert_same_stack(shown: str, raw: str) -> None:
    """The page shows the event's stack line for line; a frame's path may be shortened
    (``…/<import root>/rest``, or relative to the current directory), nothing else."""
    shown_lines, raw_lines = shown.strip("\n").splitlines(), raw.strip("\n").splitlines()
    assert len(shown_lines) == len(raw_lines), (shown, raw)
    for s_line, r_line in zip(shown_lines, raw_lines, strict=True):
        frames = parse_frames(r_line)
        if not frames:
            assert s_line == r_line
            continue
        full, short = frames[0].file, parse_frames(s_line)[0].file
        assert s_line.replace(f'"{short}"', f'"{full}"', 1) == r_line
        if short.startswith("…/"):
            assert full.endswith("/" + short[2:]) and len(short) < len(full)
        else:
            assert short == full or os.path.abspath(short) == full


def test_display_path_shortens_to_the_import_root() -> None:
    roots = ["/opt/venv/lib/python3.11/site-packages", "/usr/lib/python3.11"]
    assert display_path("/opt/venv/lib/python3.11/site-packages/google/adk/x.py", roots) == (
        "…/site-packages/google/adk/x.py")
    assert display_path("/usr/lib/python3.11/asyncio/tasks.py", roots) == (
        "…/python3.11/asyncio/tasks.py")
    assert display_path(os.path.join(os.getcwd(), "app", "tools.py"), roots) == os.path.join(
        "app", "tools.py")
    assert display_path("/elsewhere/tools.py", roots) == "/elsewhere/tools.py"


def test_summary_table_matches_the_json_document(audit: Any) -> None:
    _, doc, report, _ = audit
    assert tuple(report["summary_head"]) == model.TABLE_COLUMNS
    cols = report["summary_head"]
    for s, row in zip(doc["scenarios"], report["summary_rows"], strict=True):
        cells = dict(zip(cols, row, strict=True))
        assert cells["scenario"] == s["name"] and cells["mode"] == s["mode"]
        assert cells["verdict"] == s["verdict"].upper()
        assert int(cells["started"]) == s["started"]
        assert int(cells["orphaned"]) == s["orphaned"]
        for outcome, n in s["ended"].items():
            assert int(cells[outcome]) == n
    total = dict(zip(cols, report["summary_total"], strict=True))
    assert int(total["started"]) == doc["totals"]["started"]
    assert int(total["orphaned"]) == doc["totals"]["orphaned"]
    for outcome, n in doc["totals"]["ended"].items():
        assert int(total[outcome]) == n


def test_header_names_command_adk_version_and_date(audit: Any) -> None:
    proc, doc, report, _ = audit
    meta = report["meta"]
    assert meta["google-adk"] == adk_compat.ADK_VERSION_STRING == doc["versions"]["google-adk"]
    assert meta["command"].startswith("adk-task-telemetry audit --json --html ")
    assert meta["command"].endswith("audit.html")
    datetime.datetime.strptime(meta["date"], "%Y-%m-%d %H:%M:%S UTC")
    assert meta["exit code"] == str(proc.returncode)
    assert meta["adk-task-telemetry"] == doc["versions"]["adk-task-telemetry"]


def test_the_report_fetches_nothing_and_runs_no_script(audit: Any, out_dir: Path) -> None:
    _, _, report, page = audit
    source = (out_dir / "audit.html").read_text(encoding="utf-8")
    assert not re.search(r"https?:|//[a-z0-9]|<script|<link|<img|<iframe|@import|url\(",
                         source, re.IGNORECASE)
    assert report["scripts"] == 0
    # Chromium's own record of what the page requested: the file itself, nothing else.
    assert page.requested_urls() == [(out_dir / "audit.html").as_uri()]


def test_it_prints_with_its_colours_on_white(audit: Any) -> None:
    """Printed (CSS print media), bars keep their fills (browsers drop backgrounds
    and colours unless told to print them exactly) and the page stays light."""
    _, _, report, page = audit
    page.browser.send("Emulation.setEmulatedMedia", {"media": "print"}, page.session)
    try:
        printed = page.eval(READ_REPORT_JS)
        adjust = page.eval("getComputedStyle(document.documentElement).printColorAdjust")
    finally:
        page.browser.send("Emulation.setEmulatedMedia", {"media": ""}, page.session)
    assert adjust == "exact"
    assert _contrast(printed["body_background"], "rgb(255, 255, 255)") < 1.05
    screen_rows = [r for s in report["scenarios"] for r in s["tasks"]]
    print_rows = [r for s in printed["scenarios"] for r in s["tasks"]]
    assert [r["bar_fill"] for r in print_rows] == [r["bar_fill"] for r in screen_rows]
    assert all(r["bar"]["width"] > 0 for r in print_rows)
    pdf = page.browser.send("Page.printToPDF", {}, page.session)
    assert len(pdf["data"]) > 1000


def test_exit_code_and_stdout_are_those_of_the_command(audit: Any, out_dir: Path) -> None:
    proc, doc, _, _ = audit
    assert proc.returncode == doc["exit_code"] == (1 if has_seed_bug() else 0), proc.stderr
    assert f"HTML report written to {out_dir / 'audit.html'}" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- the demo report against the demo's own text output ----------------------------------


def test_demo_report_shows_what_the_demo_printed(
        runs: dict[str, Future[subprocess.CompletedProcess[str]]], out_dir: Path,
        browser: Chromium) -> None:
    proc = _run(runs, "demo")
    assert proc.returncode == 0, proc.stderr
    assert "Summary" in proc.stdout  # the text output is still all there
    assert f"HTML report written to {out_dir / 'demo.html'}" in proc.stderr
    report = browser.load((out_dir / "demo.html").as_uri()).eval(READ_REPORT_JS)
    text_rows = [line.split() for line in proc.stdout.splitlines()]
    rows = [r for s in report["scenarios"] for r in s["tasks"]]
    assert len(rows) == sum(1 for line in proc.stdout.splitlines()
                            if re.match(r"  \S+\s+call-\S+\s+(call|streaming)\s", line))
    for r in rows:
        tool, call_id, kind, _, label = r["cells"]
        # The timeline line of the same task ends with the same outcome label.
        assert any(line[:3] == [tool, call_id, kind] and " ".join(line).endswith(label)
                   for line in text_rows), (r, proc.stdout)
    # The summary rows read as the text summary's rows.
    for row in report["summary_rows"]:
        assert row in text_rows, (row, proc.stdout)
    assert report["meta"]["command"].startswith("adk-task-telemetry demo -s seed_bug")


# --- usage errors ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["no_dir", "a_dir", "name_too_long"])
def test_an_unwritable_path_exits_2_with_one_line(
        runs: dict[str, Future[subprocess.CompletedProcess[str]]], name: str) -> None:
    proc = _run(runs, name)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if name != "name_too_long":
        # Refused before anything ran: no progress, no output.
        assert proc.stdout == ""
    else:
        assert "PASS" in proc.stdout  # it ran, printed, then could not write
    assert lines[-1].startswith("adk-task-telemetry: error: --html: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(line.startswith("adk-task-telemetry: error") for line in lines[:-1])


# --- hand-built results: unanswered calls, failures, escaping ---------------------------


def test_unanswered_calls_failures_and_user_text_are_shown_escaped(
        browser: Chromium, out_dir: Path) -> None:
    evil_tool = '<script>alert("tool")</script>'
    stack = ('  File "/app/<tools>.py", line 7, in watch\n'
             "    await feed.read()  # <b>not bold</b>\n")
    orphan = model.Orphan(trigger="after_run", age_s=0.004, at_ns=4_000_000,
                           stacktrace=stack, still_running=False)
    unanswered = model.Result(
        "lost_answer", "a call whose task was cancelled before it answered", "async", 0.02,
        tasks=[model.Task("call-<1>", evil_tool, "call", "cancelled", 0, 3_000_000,
                           cancel_cause="caller_cancelled")],
        started=1, ended={"cancelled": 1},
        unanswered=[model.Unanswered("call-<1>", evil_tool, "caller_cancelled", "e-1"),
                    model.Unanswered("adk-9", "lookup", "unknown", "e-1")])
    late = model.Result(
        "late_orphan", "an orphan that ended on its own after its run", "async", 0.02,
        tasks=[model.Task("call-o", "watch", "streaming", "orphaned", 0, 9_000_000,
                           orphan=orphan)],
        started=1, orphaned=1)
    failed = model.Result("broken", "could not run", "live", 0.0, failure="RuntimeError: <x>")
    assert unanswered.verdict == "unanswered"
    page_html = render_report([unanswered, late, failed], ReportInfo(
        command="adk-task-telemetry audit --html 'a <b>.html'",
        versions={"google-adk": "9.9.9", "python": "3.11"},
        generated=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)))
    path = out_dir / "hand-built.html"
    path.write_text(page_html, encoding="utf-8")
    report = browser.load(path.as_uri()).eval(READ_REPORT_JS)

    assert report["scripts"] == 0  # the tool name stayed text
    lost, late_r, broken = report["scenarios"]
    assert lost["verdict"] == "unanswered"
    assert lost["tasks"][0]["cells"][0] == evil_tool
    assert lost["unanswered"] == [["call-<1>", evil_tool, "caller_cancelled", "e-1"],
                                  ["adk-9", "lookup", "unknown", "e-1"]]
    assert late_r["unanswered"] == []
    # An orphan that ended after its run: a tail to its end, no arrow.
    row = late_r["tasks"][0]
    assert row["tail"] is not None and row["arrow"] is None
    assert row["tail"]["right"] > row["bar"]["right"]
    (o,) = late_r["orphans"]
    assert o["stack"] == stack.rstrip("\n")
    assert o["stuck_file"] == ["/app/<tools>.py"]
    assert o["stuck"] == ['  File "/app/<tools>.py", line 7, in watch',
                          "    await feed.read()  # <b>not bold</b>"]
    assert "ended on its own after its run" in o["text"]
    assert broken["failure"] == "Scenario failed: RuntimeError: <x>"
    verdicts = {row[0]: row[-1] for row in report["summary_rows"]}
    assert verdicts == {"lost_answer": "UNANSWERED", "late_orphan": "ORPHANED",
                        "broken": "FAILED"}
    assert report["meta"]["command"] == "adk-task-telemetry audit --html 'a <b>.html'"
    assert report["meta"]["date"] == "2026-01-02 03:04:05 UTC"
