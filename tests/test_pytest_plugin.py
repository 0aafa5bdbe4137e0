"""The pytest plugin (``--adk-fail-on-orphans``, ``adk_tool_tasks``), run as a user runs it.

Each test writes a small test project with ``pytester`` and runs pytest on it in a
subprocess, so the plugin is loaded by its ``pytest11`` entry point (no ``-p``) from
the installed package. The inner tests drive the real ADK Runner with the scripted
model; the leak is one on every ADK version that lets plugins see live tool calls: a
live run whose streaming tool ignores cancellation, left by its caller.
"""

from __future__ import annotations

import difflib
import re
import textwrap

import pytest

from adk_task_telemetry import adk_compat as compat

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.skipif(
    not compat.LIVE_CALLS_SEEN,
    reason="the plugin sees no live tool call on this ADK: no live leak to see")

#: The inner project's helpers: ``live_leak`` orphans one streaming call
#: (``stubborn_feed`` / ``call-feed``) and stops it afterwards; ``clean_run`` ends cleanly.
LEAKY = '''
import asyncio
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_task_telemetry.scenarios import ScriptedLlm, call, run_scenario


async def live_leak(plugins: list[Any]) -> Runner:
    """The caller leaves a live run whose streaming tool ignores cancellation."""
    started, stop = asyncio.Event(), asyncio.Event()
    body: list[Any] = []

    async def stubborn_feed():
        """Streams ticks; ignores cancellation until told to stop."""
        body.append(asyncio.current_task())
        started.set()
        while not stop.is_set():
            try:
                await asyncio.sleep(0.05)  # STUCK HERE
            except asyncio.CancelledError:
                continue
            yield "tick"

    model = ScriptedLlm()
    agent = LlmAgent(name="ticker", model=model, instruction="scripted", tools=[stubborn_feed])
    runner = Runner(app=App(name="leaky_app", root_agent=agent, plugins=plugins),
                    session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="leaky_app", user_id="u")
    queue = LiveRequestQueue()
    agen = runner.run_live(user_id="u", session_id=session.id, live_request_queue=queue,
                           run_config=RunConfig(streaming_mode=StreamingMode.BIDI,
                                                response_modalities=[types.Modality.TEXT]))
    model.say_live(call("stubborn_feed", "call-feed"))
    async for _event in agen:  # read in this task: ADK detaches its context where read
        if started.is_set():
            break
    await agen.aclose()  # the caller leaves; the tool keeps running
    queue.close()
    await asyncio.sleep(0)
    await runner.close()
    stop.set()
    await asyncio.wait(body, timeout=5)
    return runner


async def clean_run(plugins: list[Any]) -> None:
    await run_scenario("single_call", plugins)
'''

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

#: Inner tests for the gate: a leak in each phase, one that fails anyway, one clean.
GATE_TESTS = '''
import asyncio

import pytest

from leaky import clean_run, live_leak


@pytest.fixture
def leaks_in_setup():
    asyncio.run(live_leak([]))


@pytest.fixture
def leaks_in_teardown():
    yield
    asyncio.run(live_leak([]))


def test_leak():
    asyncio.run(live_leak([]))


def test_clean():
    asyncio.run(clean_run([]))


def test_fails_and_leaks():
    asyncio.run(live_leak([]))
    assert 1 + 1 == 3, "its own error"


def test_setup_leak(leaks_in_setup):
    pass


def test_teardown_leak(leaks_in_teardown):
    pass
'''


def _trigger() -> str:
    """How the plugin learns that ``live_leak``'s run ended on this ADK."""
    if compat.LIVE_RUN_HAS_OWN_TASK:
        return "run_task_done"  # 2.8 on: ADK's own live task ends with the run
    return "live_teardown"  # older: the hook on the live run's end (adk_compat)


def _project(pytester: pytest.Pytester, tests: str, ini: str = INI) -> None:
    pytester.makeini(ini)
    pytester.makepyfile(leaky=LEAKY, test_inner=textwrap.dedent(tests))


def _stuck_line(pytester: pytest.Pytester) -> int:
    """The line of the inner project where ``stubborn_feed`` waits."""
    lines = (pytester.path / "leaky.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "STUCK HERE" in line)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # No -p: the plugin comes in through its entry point, as in a user's project.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-ra", *args, timeout=240)


def _failure(out: str, title: str) -> str:
    """The block of the failures/errors section that pytest titles ``title``."""
    m = re.search(rf"_{{3,}} {re.escape(title)} _{{3,}}\n(.*?)(?=\n_{{3,}} |\n={{3,}} )",
                  out, re.S)
    assert m, f"no report titled {title!r} in:\n{out}"
    return m.group(1)


def _names_the_orphan(block: str, pytester: pytest.Pytester) -> None:
    assert "1 tool task orphaned during" in block, block
    assert f"stubborn_feed call-feed (streaming): run ended by {_trigger()}" in block, block
    assert f"stuck at leaky.py:{_stuck_line(pytester)} in stubborn_feed" in block, block
    assert "await asyncio.sleep(0.05)  # STUCK HERE" in block, block


def test_a_leaking_test_fails_and_names_its_orphan(pytester: pytest.Pytester) -> None:
    _project(pytester, GATE_TESTS)
    result = _run(pytester, "--adk-fail-on-orphans")
    out = result.stdout.str()
    result.assert_outcomes(failed=2, passed=2, errors=2)
    _names_the_orphan(_failure(out, "test_leak"), pytester)
    # A test that fails anyway keeps its own error and gains the note.
    own = _failure(out, "test_fails_and_leaks")
    assert "AssertionError: its own error" in own
    assert "adk-task-telemetry: orphaned tool tasks (call)" in own
    _names_the_orphan(own, pytester)
    # Setup and teardown count for their test (e.g. a fixture that closes a Runner).
    _names_the_orphan(_failure(out, "ERROR at setup of test_setup_leak"), pytester)
    _names_the_orphan(_failure(out, "ERROR at teardown of test_teardown_leak"), pytester)
    result.stdout.fnmatch_lines([  # the short summary, cut at 80 columns
        "ERROR test_inner.py::test_setup_leak - 1 tool task orphaned during setup*",
        "ERROR test_inner.py::test_teardown_leak - 1 tool task orphaned during teardow*",
        "FAILED test_inner.py::test_leak - 1 tool task orphaned during call: stubborn_*",
        "FAILED test_inner.py::test_fails_and_leaks - AssertionError: its own error",
    ])
    assert "test_clean" not in out  # it passed: not in any section
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_without_the_option_nothing_changes(pytester: pytest.Pytester) -> None:
    _project(pytester, GATE_TESTS + '''

def test_nothing_installed():
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    from adk_task_telemetry import TaskTelemetryPlugin, observe
    from adk_task_telemetry.scenarios import ScriptedLlm

    agent = LlmAgent(name="a", model=ScriptedLlm(), instruction="x")
    runner = Runner(app=App(name="a", root_agent=agent), session_service=InMemorySessionService())
    assert not any(isinstance(p, TaskTelemetryPlugin) for p in runner.plugin_manager.plugins)
    assert observe.observers == []
''')
    result = _run(pytester)
    result.assert_outcomes(failed=1, passed=5)  # only the test's own assertion fails
    assert "FAILED test_inner.py::test_fails_and_leaks - AssertionError: its own error" in (
        result.stdout.str())
    # The same output, line for line, as with the plugin not loaded at all.
    without = _run(pytester, "-p", "no:adk_task_telemetry")
    assert "adk-task-telemetry" not in without.stdout.str()
    diff = list(difflib.unified_diff(_comparable(without.stdout.lines),
                                     _comparable(result.stdout.lines), lineterm=""))
    assert not diff, "\n".join(diff)


def _comparable(lines: list[str]) -> list[str]:
    """Output lines without what differs between two runs: the plugin list, timing
    (and the rule's width around it), asyncio task numbers."""
    skip = ("plugins: ", "running: ", "     in: ")
    return [re.sub(r"Task-\d+|\d+\.\d+s|runpytest-\d|=+", "#", line) for line in lines
            if not line.startswith(skip)]


def test_the_ini_option_turns_it_on(pytester: pytest.Pytester) -> None:
    _project(pytester, GATE_TESTS, INI + "adk_fail_on_orphans = true\n")
    result = _run(pytester, "-k", "test_leak or test_clean")
    result.assert_outcomes(failed=1, passed=1)
    _names_the_orphan(_failure(result.stdout.str(), "test_leak"), pytester)


def test_an_orphan_outside_any_test_is_listed_in_the_summary(pytester: pytest.Pytester) -> None:
    _project(pytester, """
import asyncio

from leaky import live_leak

asyncio.run(live_leak([]))  # at collection: no test is running


def test_clean():
    pass
""")
    result = _run(pytester, "--adk-fail-on-orphans")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*= adk-task-telemetry: tool tasks orphaned outside any test =*",
        f"  stubborn_feed call-feed (streaming): run ended by {_trigger()} *",
        f"    stuck at leaky.py:{_stuck_line(pytester)} in stubborn_feed",
    ])


#: Inner tests of the fixture, each through pytest-asyncio or anyio, with the test's
#: own plugin or none (then the instrumentor's shared one).
FIXTURE_TESTS = '''
import pytest

from adk_task_telemetry import TaskTelemetryPlugin, adk_compat
from adk_task_telemetry.scenarios import run_scenario

from leaky import live_leak

OWN = [pytest.param(True, id="own_plugin"), pytest.param(False, id="no_plugin")]


def plugins(own):
    return [TaskTelemetryPlugin()] if own else []


@pytest.mark.asyncio
@pytest.mark.parametrize("own", OWN)
async def test_one_fails_siblings_cancelled(adk_tool_tasks, own):
    run = await run_scenario("parallel_one_fails", plugins(own))
    await run.probe.cleanup()
    sibling = ("cancelled" if adk_compat.FAILED_CALL_CANCELS_SIBLINGS else "orphaned")
    assert adk_tool_tasks.outcomes() == {
        "call-fail": "error", "call-s1": sibling, "call-s2": sibling}, adk_tool_tasks
    assert len(adk_tool_tasks) == 3  # each task once, whoever registered the plugin
    failed = adk_tool_tasks.by_call_id("call-fail")
    assert (failed.tool_name, failed.kind, failed.error_type, failed.orphaned) == (
        "flaky_api", "call", "ConnectionError", False)
    if adk_compat.FAILED_CALL_CANCELS_SIBLINGS:
        assert adk_tool_tasks.by_call_id("call-s1").cancel_cause == "sibling_failed"
        assert adk_tool_tasks.orphans == []


@pytest.mark.anyio
@pytest.mark.parametrize("own", OWN)
async def test_anyio_leak_is_listed(adk_tool_tasks, own):
    await live_leak(plugins(own))
    [orphan] = adk_tool_tasks.orphans
    assert (orphan.tool_name, orphan.call_id, orphan.kind, orphan.outcome) == (
        "stubborn_feed", "call-feed", "streaming", "orphaned")
    assert orphan.trigger and "stubborn_feed" in orphan.stacktrace
    assert adk_tool_tasks.by_call_id("call-feed") is orphan


def test_loaded_by_its_entry_point(request):
    dists = {dist.project_name for _plugin, dist in
             request.config.pluginmanager.list_plugin_distinfo()}
    assert "adk-task-telemetry" in dists
'''


@pytest.fixture
def anyio_project(pytester: pytest.Pytester) -> pytest.Pytester:
    _project(pytester, FIXTURE_TESTS)
    pytester.makeconftest('''
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"
''')
    return pytester


def test_the_fixture_lists_each_task_once(anyio_project: pytest.Pytester) -> None:
    result = _run(anyio_project, "-v")
    result.assert_outcomes(passed=5)
    assert "orphaned during" not in result.stdout.str()  # listed, not failed


def test_the_gate_fails_async_leaks_with_and_without_an_own_plugin(
        anyio_project: pytest.Pytester) -> None:
    result = _run(anyio_project, "--adk-fail-on-orphans", "-k", "anyio or one_fails")
    out = result.stdout.str()
    siblings = compat.FAILED_CALL_CANCELS_SIBLINGS
    result.assert_outcomes(failed=2 if siblings else 4, passed=2 if siblings else 0)
    for own in ("own_plugin", "no_plugin"):
        # Reported once: the instrumentor never adds a second plugin beside the app's.
        _names_the_orphan(_failure(out, f"test_anyio_leak_is_listed[{own}]"), anyio_project)


def test_loading_the_plugin_imports_neither_adk_nor_the_sdk() -> None:
    """pytest loads the entry point in every project where this package is installed:
    without the option that must cost nothing (the package's public names are lazy)."""
    import subprocess
    import sys

    code = ("import sys, adk_task_telemetry, adk_task_telemetry.pytest_plugin; "
            "heavy = sorted(m for m in sys.modules if m.startswith(('google.adk', "
            "'opentelemetry.sdk', 'google.genai'))); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out
    # ... and the public names still resolve on first use.
    code = "from adk_task_telemetry import TaskTelemetryPlugin, configure_telemetry; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "ok"
