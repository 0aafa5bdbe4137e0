"""Writes docs/versions.md from what `make matrix` recorded, and the version tables of
README.md and docs/thread-pool.md from adk_compat's ``HOLDS_ON``.

Usage: python tools/versions_doc.py MATRIX_DIR LOG_DIR OUTPUT VERSION...
       python tools/versions_doc.py --tables [--check]

MATRIX_DIR holds, per google-adk version, ``<v>.json`` (tools/version_report.py: the
tools' ground truth and the plugin's report for every scenario, and the feature
probes) and ``<v>.rc`` (the lifecycle tests' exit status). LOG_DIR holds the
``*.result`` line of each lifecycle run (the Python interpreters' included).

``--tables`` rewrites each marked table (``TABLES``; the marker line is this tool's)::

    <!-- versions:begin NAME: written by tools/versions_doc.py --tables from ... -->
    | ... |
    <!-- versions:end -->

Its rows' google-adk ranges are computed from ``HOLDS_ON`` over the minors the Makefile
tests (``ADK_MINORS``), so a range is never typed twice. ``--check`` changes nothing and
exits 1, with a diff, if a committed table differs (tests/test_docs_versions.py).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _version_facts() -> ModuleType:
    """adk_compat's version facts (``HOLDS_ON``, ``OLDEST_SUPPORTED_ADK``), the owner of
    every range below, loaded by path: it imports nothing (google-adk need not be
    installed in the interpreter that writes the doc)."""
    path = ROOT / "src" / "adk_task_telemetry" / "adk_compat" / "versions.py"
    spec = importlib.util.spec_from_file_location("_adk_versions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FACTS = _version_facts()
HOLDS_ON: dict[str, str] = _FACTS.HOLDS_ON
OLDEST = _FACTS.OLDEST_SUPPORTED_ADK
OLDEST_MINOR = OLDEST.rsplit(".", 1)[0]

#: What each probe means, in the order of *Where each behaviour holds*; the releases
#: are adk_compat's ``HOLDS_ON`` (bisected on the latest patch of every minor, checked
#: per version by tests/test_adk_compat.py).
_MEANINGS = [
    ("live_send_loop_polls",
     "the live send loop polls its queue with `asyncio.wait_for(..., timeout)`: on Python "
     "before 3.12 that can swallow the cancel of ADK's teardown, and the caller's "
     "`aclose()` of the live run then never returns (with or without plugins)"),
    ("live_tool_hook",
     "ADK calls no plugin callback for a live tool call: the plugin's hook calls its own "
     "`before_tool_callback`, `after_tool_callback` and `on_tool_error_callback` there "
     "(see *Hooks* below)"),
    ("live_run_end_hook",
     "ADK gives plugins no signal when a live run ends: the plugin's hook reports its "
     "orphans then, as `live_teardown` (see *Hooks* below)"),
    ("agent_tool_keeps_app_name",
     "a nested AgentTool run belongs to the parent's app (before: its app name is the "
     "child agent's name, so its spans carry that `adk.app.name`)"),
    ("runner_closes_plugins",
     "`Runner.close()` closes plugins (before: the plugin never hears `plugin_close`)"),
    ("tool_thread_pool",
     "ADK's tool thread pool (`RunConfig.tool_thread_pool_config`): live calls of a "
     "synchronous tool run on it ([thread-pool.md](thread-pool.md))"),
    ("live_calls_run_plugin_callbacks",
     "live tool calls run the plugins' before/after tool callbacks"),
    ("failed_call_cancels_siblings",
     "a failed parallel call cancels its siblings (before: they keep running after the "
     "step raised, and the plugin reports them as orphans)"),
    ("live_teardown_cancels_background_tools",
     "live teardown cancels background streaming tools (on the other releases it "
     "cancels none, so both seed calls keep running)"),
    ("stop_background_tool_tasks",
     "that teardown is `BaseLlmFlow._stop_background_tool_tasks` (later: "
     "`google.adk.live._flow_utils`)"),
    ("node_runtime", "the 2.x node runtime (`google.adk.workflow`)"),
    ("run_error_callback", "`on_run_error_callback` (`run_error` trigger)"),
    ("live_run_has_own_task",
     "a live run's agent runs in a task of ADK's own that ends with the run: the "
     "plugin sees the end as that task's end (`run_task_done`)"),
    ("abort_signal",
     "`Runner.run_async(abort_signal=...)` (the `caller_abort` scenario)"),
    ("run_async_tool_thread_pool",
     "`run_async` calls of a synchronous tool run on that pool too"),
    ("background_tool_registry", "background tools kept per call id: ADK issue 7058 fixed"),
]
CHANGES = [(probe, HOLDS_ON[probe], what) for probe, what in _MEANINGS]

#: The hooks adk_compat installs (chosen by the probes above), for the doc.
HOOKS = [
    ("`google.adk.agents.base_agent.BaseAgent.run_live`",
     f"{HOLDS_ON['live_run_end_hook']} (`live_run_end_hook`)",
     "for the root agent of a live run only (the Runner hands it the invocation's own "
     "context; a sub-agent gets its parent's copy, and every other call gets ADK's own "
     "generator back) the generator ADK reads is wrapped; when it ends (the caller's "
     "`aclose()`, the queue closed, an error, a cancelled consumer), after the agent's "
     "whole teardown, each listener plugin of the invocation hears "
     "`live_run_ended(ctx)`: trigger `live_teardown`. ADK looks it up when the run "
     "starts, after `before_run_callback`, where a plugin that an uninstrument "
     "unhooked listens again"),
    ("`google.adk.flows.llm_flows.functions._process_function_live_helper`",
     f"{HOLDS_ON['live_tool_hook']} (`live_tool_hook`)",
     "runs one live call's tool in that call's own task, inside ADK's `execute_tool` "
     "span: each listener plugin's `before_tool_callback` runs before it, "
     "`after_tool_callback` after it (a streaming call's background task is registered "
     "in `active_streaming_tools` by then), `on_tool_error_callback` if it raises (then "
     "re-raised); what the tool returns is returned unchanged. It runs after the agent's "
     "own `before_tool_callback`s (1.27 calls plugins first): a live call one of those "
     "answers runs no tool and gets no span"),
]

HOOKS_INTRO = """\
These releases are frozen, so a hook on their live path is safe there. Each is installed
once per process, with the first `TaskTelemetryPlugin`, only where its probe holds (the
layout it was written for), kept while any plugin object lives (a `Runner.close()` never
undoes it), and undone when the last plugin is collected or at the instrumentor's
`uninstrument()`: the original function is put back, the very same object
(tests/test_live_hooks.py). A hook calls only the
`TaskTelemetryPlugin`s registered in the invocation's own plugin manager, never another
plugin, never changes what ADK runs or returns, and swallows what a listener raises."""

SHORT = {
    "agent_tool_keeps_app_name": "app", "runner_closes_plugins": "close",
    "live_calls_run_plugin_callbacks": "live-cb", "failed_call_cancels_siblings": "sib",
    "live_teardown_cancels_background_tools": "teardown", "node_runtime": "node",
    "run_error_callback": "run-err", "abort_signal": "abort",
    "background_tool_registry": "7058-fix", "stop_background_tool_tasks": "stop-bg",
    "live_run_has_own_task": "live-task", "live_run_end_hook": "end-hook",
    "live_tool_hook": "tool-hook", "live_send_loop_polls": "polls",
    "tool_thread_pool": "pool", "run_async_tool_thread_pool": "pool-async",
}


def _outcomes(s: dict[str, Any]) -> str:
    return ", ".join(f"{c} {t['outcome']}" for c, t in sorted(s.get("tasks", {}).items()))


def _seed(doc: dict[str, Any]) -> tuple[str, str]:
    s = next((x for x in doc["scenarios"] if x["name"] == "seed_bug"), {})
    running = s.get("pending", [])
    ran = s.get("ran", [])
    if len(ran) < 2:
        return "? (scenario did not run)", "-"
    if not running:
        truth = "no: both calls cancelled"
    elif len(running) == len(ran):
        truth = "yes: both calls keep running (teardown cancels none)"
    else:
        truth = f"yes: {', '.join(running)} keeps running"
    orphans = s.get("orphans", [])
    triggers = sorted({str(s["tasks"][c]["detail"]) for c in orphans})
    when = ("at the live run's end" if set(orphans) <= set(s.get("orphans_at_end", []))
            else "at Runner.close()")
    reported = (f"{len(orphans)} ({', '.join(orphans)}; {', '.join(triggers)}; {when})"
                if orphans else "0" + ("" if not running else " (plugin sees no live call)"
                                       if not s.get("tasks") else " (missed)"))
    return truth, reported


def _diffs(doc: dict[str, Any], newest: dict[str, Any] | None) -> str:
    if newest is None:
        return "? (newest not run)"
    if doc is newest:
        return "reference"
    mine = {s["name"]: s for s in doc["scenarios"]}
    out = []
    for ref in newest["scenarios"]:
        name = ref["name"]
        if name == "seed_bug":
            continue
        s = mine.get(name)
        if s is None:
            out.append(f"{name}: not offered")
        elif s.get("pending") != ref.get("pending") or _outcomes(s) != _outcomes(ref):
            what = _outcomes(s) or "no tool task seen"
            left = f"; still running: {', '.join(s['pending'])}" if s.get("pending") else ""
            out.append(f"{name}: {what}{left}")
    return "; ".join(out) or "none"


def main(matrix: Path, logs: Path, output: Path, versions: list[str]) -> None:
    docs: dict[str, dict[str, Any]] = {}
    for v in versions:
        f = matrix / f"{v}.json"
        if f.exists() and f.stat().st_size:
            docs[v] = json.loads(f.read_text())
    newest = docs.get(versions[-1])
    lines = [
        "# Supported google-adk versions",
        "",
        "Generated by `make matrix` (tools/versions_doc.py): the lifecycle tests and every",
        f"scenario on the latest patch of each google-adk minor since {OLDEST_MINOR}, in a "
        "venv of its",
        "own. *Seed bug* is ADK issue 7058 by the tools' own ground truth (which streaming",
        "calls' bodies are still running after the caller left the live run); *orphans",
        "reported* is what the plugin said (call ids; the `adk.run.end_trigger`; whether",
        "it was said when the live run ended or only at `Runner.close()`). *Hooks*: what",
        "the plugin wraps on that release (see *Hooks* below).",
        "*Differences* are the scenarios whose outcome or ground truth differs from the",
        "newest version. Features: the probes of `adk_compat.features()` that hold.",
        "",
        "| google-adk | seed bug (ground truth) | orphans reported | hooks | features | "
        "differences from the newest | lifecycle tests |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in versions:
        doc = docs.get(v)
        rc = (matrix / f"{v}.rc").read_text().strip() if (matrix / f"{v}.rc").exists() else ""
        result = logs / f"google-adk-{v}.result"
        summary = result.read_text().strip() if result.exists() else ""
        if doc is None:
            lines.append(f"| {v} | not run | | | | | {summary or 'not run'} |")
            continue
        truth, reported = _seed(doc)
        feats = " ".join(SHORT.get(k, k) for k, on in sorted(doc["features"].items()) if on)
        counts = ", ".join(re.findall(r"\d+ (?:passed|failed|xfailed|xpassed|skipped|errors?)",
                                      summary))
        verdict = ("pass" if rc == "0" else "FAIL") + (f" ({counts})" if counts else "")
        hooks = ", ".join(f"`{'.'.join(h.split('.')[-2:])}`"
                          for h in doc.get("hooks", [])) or "-"
        lines.append(f"| {doc['google-adk']} | {truth} | {reported} | {hooks} | "
                     f"{feats or '-'} | {_diffs(doc, newest)} | {verdict} |")
    missing = [v for v in versions if v not in docs]
    lines += ["", f"{len(docs)} of {len(versions)} minors ran"
              + (f"; not run: {', '.join(missing)}." if missing else ".")]
    lines += ["", "Features: " + ", ".join(f"{s} = `{k}`" for k, s in SHORT.items()) + "."]
    lines += ["", "## Install (draft for README)", "",
              "Not on a package index yet: from a checkout, or the wheel `make wheel` builds.",
              "",
              "```sh",
              "pip install ./adk-task-telemetry               # a checkout, or dist/*.whl",
              "pip install './adk-task-telemetry[prometheus]' # + a Prometheus scrape endpoint",
              "```",
              "",
              f"It depends on `google-adk>={OLDEST_MINOR}` with no upper bound, so installing it "
              "beside an",
              "app that pins google-adk (2.9.0, 1.39.0, any release since "
              f"{OLDEST_MINOR}) leaves that pin",
              "alone (`make install-check` shows it with pip's own resolver). On a google-adk",
              "newer than the newest tested one, the plugin logs one INFO line saying so and",
              "keeps working: every difference it relies on is probed by feature.",
              "On an install of google-adk without its source files (`.pyc` only: slim",
              "images, bundlers), the probes that read ADK's source answer what *Where each",
              "behaviour holds* records for the installed release, and the plugin logs one",
              "WARNING naming them (`adk_compat.decided_without_source()`).",
              "`[export]` still works: it is the `prometheus` extra under its old name."]
    lines += ["", "## Python", "",
              "The lifecycle tests with the newest google-adk on each interpreter:", ""]
    for r in sorted(logs.glob("python*.result")):
        ran = r.with_suffix(".versions")
        what = f" ({ran.read_text().strip()})" if ran.exists() else ""
        lines.append(f"- {r.stem}{what}: {r.read_text().strip()}")
    low = logs / "lowest-bounds.result"
    lines += ["", "## Lowest bounds", "",
              "pyproject.toml's lowest bounds installed exactly (tools/lowest_pins.py; "
              f"google-adk {OLDEST}):",
              "", f"- {low.read_text().strip() if low.exists() else 'not run'}"]
    lines += ["", "## Where each behaviour holds", "",
              "| probe | google-adk | what |", "|---|---|---|"]
    lines += [f"| `{k}` | {where} | {what} |" for k, where, what in CHANGES]
    lines += ["", "## Hooks", "", *HOOKS_INTRO.splitlines(), "",
              "| hook | google-adk | what |", "|---|---|---|"]
    lines += [f"| {k} | {where} | {what} |" for k, where, what in HOOKS]
    output.write_text("\n".join(lines) + "\n")


# --- the version tables of README.md and docs/thread-pool.md --------------------------

Minor = tuple[int, int]


def tested_minors() -> list[Minor]:
    """The google-adk minors ``make matrix`` runs (the Makefile's ``ADK_MINORS``), in
    order: the releases a range of a table can name."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^ADK_MINORS \?=((?:.*\\\n)*.*)$", text, re.M)
    assert m is not None, "the Makefile sets no ADK_MINORS"
    return [_FACTS.parse_version(v)[:2] for v in m[1].replace("\\", " ").split()]


def holds(probe: str, minor: Minor) -> bool:
    return bool(_FACTS.holds(probe, (*minor, 0)))


def ranges(minors: list[Minor], sep: str) -> str:
    """``minors`` (in ADK_MINORS order) as runs of consecutive tested minors: "1.14 to
    1.23, 2.0 to 2.7" (``sep`` between the ends of a run), "1.39"."""
    tested = tested_minors()
    runs: list[list[Minor]] = []
    for minor in minors:
        if runs and tested.index(minor) == tested.index(runs[-1][-1]) + 1:
            runs[-1].append(minor)
        else:
            runs.append([minor])
    name = "{}.{}".format
    return ", ".join(name(*r[0]) if len(r) == 1 else f"{name(*r[0])}{sep}{name(*r[-1])}"
                     for r in runs)


def _end_trigger(minor: Minor) -> str:
    """How the plugin hears a live run's end on ``minor`` (the ``adk.run.end_trigger``)."""
    if holds("live_run_has_own_task", minor):
        return "run_task_done"
    if holds("live_run_end_hook", minor):
        return "live_teardown"
    raise ValueError(f"HOLDS_ON gives no live run end signal on {minor}: say what the "
                     "plugin reports there")


def _seed_bug(minor: Minor) -> tuple[str, str]:
    """README's row for ``minor``: ADK issue 7058 by the tools' own record, and what the
    plugin reports (the seed_bug scenario: two streaming calls, the caller leaves)."""
    if holds("background_tool_registry", minor):
        return "fixed: both calls cancelled", "no orphan"
    if holds("live_teardown_cancels_background_tools", minor):
        return ("the first call keeps running",
                f"one orphan, when the live run ends (`{_end_trigger(minor)}`)")
    return ("both calls keep running (teardown stops no streaming tool)",
            f"two orphans, when the live run ends (`{_end_trigger(minor)}`)")


def _thread_pool(minor: Minor) -> tuple[str, str]:
    """docs/thread-pool.md's row for ``minor``: where ADK runs a synchronous tool given
    ``tool_thread_pool_config``, and what the plugin shows of it."""
    if not holds("tool_thread_pool", minor):
        return "no such setting", "nothing changes (no hook)"
    if holds("run_async_tool_thread_pool", minor):
        return ("run_async and live calls on the pool",
                "thread orphans in both (checked on 2.11, 2.12, 2.13; Python 3.10 with "
                "2.11, 3.13 with 2.13)")
    if not holds("live_calls_run_plugin_callbacks", minor):
        return ("live calls on the pool; run_async on the event loop",
                "ADK calls no plugin callback for a live call: no task to bind (hook "
                "installed, idle)")
    return ("live calls on the pool; run_async on the event loop",
            "live: thread orphans (`live_thread_pool`; checked on 1.33, 1.39.1, 2.0, 2.5, "
            "2.9.2, 2.10); run_async: an ordinary call")


@dataclass(frozen=True)
class Table:
    """A table of a doc whose rows are the tested minors grouped by ``row``."""

    name: str
    doc: str  # relative to the repository
    header: str  # the header line and the separator line
    row: Callable[[Minor], tuple[str, ...]]
    sep: str  # between the ends of a range
    newest_first: bool  # rows by their oldest minor, newest or oldest first

    def render(self) -> str:
        groups: dict[tuple[str, ...], list[Minor]] = {}
        for minor in tested_minors():
            groups.setdefault(self.row(minor), []).append(minor)
        order = sorted(groups.items(), key=lambda g: min(g[1]), reverse=self.newest_first)
        rows = [f"| {ranges(minors, self.sep)} | {' | '.join(cells)} |"
                for cells, minors in order]
        return "\n".join([self.header, *rows]) + "\n"


TABLES = (
    Table("seed-bug", "README.md",
          "| google-adk | seed bug (the tools' own record) | what the plugin reports |\n"
          "|---|---|---|", _seed_bug, "-", newest_first=True),
    Table("thread-pool", "docs/thread-pool.md",
          "| google-adk | synchronous `FunctionTool` with `tool_thread_pool_config` | "
          "what the plugin shows |\n|---|---|---|", _thread_pool, " to ", newest_first=False),
)
def _seed_bug_sentence() -> str:
    """README's opening paragraph on the seed bug: which tested releases have it."""
    tested = tested_minors()
    fixed = [m for m in tested if holds("background_tool_registry", m)]
    have = [m for m in tested if not holds("background_tool_registry", m)]
    if not fixed or not have:
        raise ValueError("HOLDS_ON no longer splits the tested minors into releases with "
                         "and without ADK issue 7058: rewrite README's paragraph")
    first = "{}.{}".format(*min(fixed))
    return (f"**The bug that motivates it** (ADK issue 7058, fixed in google-adk {first}): "
            "when one live\nmodel response held two calls to the same streaming tool, ADK "
            "kept one task per tool *name*,\nso teardown cancelled only the last call and "
            "the first kept running forever. Of the tested\nreleases, google-adk "
            f"{ranges(have, ' to ')} have it (or worse: see the table under\n"
            "[Supported versions](#supported-versions)); `make demo` shows it happen.\n")


@dataclass(frozen=True)
class Sentence:
    """A paragraph of a doc that states a range of releases, written from HOLDS_ON."""

    name: str
    doc: str
    render: Callable[[], str]


SENTENCES = (Sentence("seed-bug-releases", "README.md", _seed_bug_sentence),)
_BEGIN = "<!-- versions:begin {}: written by tools/versions_doc.py --tables from " \
         "adk_compat/versions.py -->"
_END = "<!-- versions:end -->"


def committed(table: Table | Sentence) -> tuple[list[str], int, int]:
    """The lines of ``table``'s doc, and the indexes of its marker lines."""
    lines = (ROOT / table.doc).read_text().splitlines()
    begin = _BEGIN.format(table.name)
    if begin not in lines:
        raise ValueError(f"{table.doc} has no line {begin}")
    i = lines.index(begin)
    j = lines.index(_END, i)
    return lines, i, j


def stale(table: Table | Sentence) -> list[str]:
    """A diff of ``table``'s committed copy against HOLDS_ON's; empty when current."""
    lines, i, j = committed(table)
    return list(difflib.unified_diff(lines[i + 1:j], table.render().splitlines(),
                                     f"{table.doc} ({table.name})", "HOLDS_ON", lineterm=""))


def write_tables(check: bool) -> int:
    status = 0
    for table in (*TABLES, *SENTENCES):
        diff = stale(table)
        if not diff:
            continue
        if check:
            print("\n".join(diff))
            status = 1
            continue
        lines, i, j = committed(table)
        lines[i + 1:j] = table.render().splitlines()
        (ROOT / table.doc).write_text("\n".join(lines) + "\n")
        print(f"{table.doc}: {table.name} written")
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--tables"]:
        sys.exit(write_tables(check=sys.argv[2:] == ["--check"]))
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
