"""This package as a user installs it: a wheel in a virtualenv's site-packages, no extras.

``installed_env.make_env`` builds the virtualenv from the running interpreter (the
ADK, SDK and pytest under test), without ``opentelemetry-instrumentation`` (a plain
``pip install adk-task-telemetry``), and pip installs two wheels into it: this
package, and ``leaky_tools``, a user's tool package whose streaming tool leaks.

- Where an orphan is stuck: a tool in site-packages is the user's code. The demo,
  the audit (text, JSON), the HTML report and the pytest failure all name the tool's
  own line, never ``asyncio/tasks.py`` (a venv's ``lib/python3.X`` holds its
  site-packages, which was taken for the standard library).
- The pytest gate on a plain install: a test that leaks from a Runner listing no
  plugin fails, as with the extra.
"""

from __future__ import annotations

import html
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from adk_task_telemetry import adk_compat as compat

from .installed_env import INSTRUMENT_EXTRA, Env, build_wheel, make_env
from .test_pytest_plugin import INI, LEAKY

pytestmark = pytest.mark.skipif(
    not compat.LIVE_CALLS_RUN_PLUGIN_CALLBACKS,
    reason="this ADK calls no plugin callback for a live tool call: no live leak to see")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("installed")
    tools = root / "src" / "leaky_tools"
    tools.mkdir(parents=True)
    (tools / "__init__.py").write_text(LEAKY)
    wheel = build_wheel(root, "leaky-tools", tools)
    yield make_env(root / "venv", leave_out=INSTRUMENT_EXTRA, wheels=[wheel])


def _line_of(path: Path, after: str, text: str) -> int:
    """The first line holding ``text`` after the line holding ``after``."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines[start:], start + 1) if text in line)


def test_the_environment_is_a_plain_install(env: Env, tmp_path: Path) -> None:
    code = ("import importlib.util as u, adk_task_telemetry, leaky_tools; "
            "print(u.find_spec('opentelemetry.instrumentation') is None, "
            "adk_task_telemetry.__file__, leaky_tools.__file__)")
    proc = env.run("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    absent, package, tools = proc.stdout.split()
    assert absent == "True"
    assert Path(package).is_relative_to(env.site) and Path(tools).is_relative_to(env.site)


def test_demo_audit_and_html_name_the_installed_tool_line(env: Env, tmp_path: Path) -> None:
    tools_py = env.site / "adk_task_telemetry" / "scenarios" / "tools.py"
    line = _line_of(tools_py, "async def stubborn_feed", "await asyncio.sleep(0.05)")
    cli = "adk-task-telemetry"  # the console script pip made
    proc = env.run("audit", "-q", "-s", "live_stubborn_tool", "--json", "--html",
                   "report.html", cwd=tmp_path, program=cli)
    assert proc.returncode == 1, proc.stderr  # 1: an orphan (this scenario always has one)
    [orphan] = json.loads(proc.stdout)["scenarios"][0]["orphans"]
    assert orphan["stuck_at"] == {"file": str(tools_py), "line": line,
                                  "function": "stubborn_feed",
                                  "code": "await asyncio.sleep(0.05)"}, orphan
    report = (tmp_path / "report.html").read_text()
    assert (f'<mark class="stuck"><span class="frame" data-file="{html.escape(str(tools_py))}"'
            in report)
    demo = env.run("demo", "-q", "-s", "live_stubborn_tool", "--color", "never",
                   cwd=tmp_path, program=cli)
    assert demo.returncode == 0, demo.stderr
    # The terminal names it as the HTML report shows it (stacks.display_path): from its
    # import root, so the install prefix does not fill the line.
    assert f"stuck at {_shown(env, tools_py)}:{line} in stubborn_feed" in demo.stdout, \
        demo.stdout


GATE = '''
import asyncio

from adk_task_telemetry import TaskTelemetryPlugin
from leaky_tools import live_leak


def test_own_plugin_leaks():
    asyncio.run(live_leak([TaskTelemetryPlugin()]))


def test_no_plugin_leaks():  # README: "no change to the tests"
    asyncio.run(live_leak([]))
'''


@pytest.fixture(scope="module")
def gate(env: Env, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of ``pytest --adk-fail-on-orphans`` on GATE, run in the virtualenv."""
    project = tmp_path_factory.mktemp("gate")
    (project / "test_inner.py").write_text(textwrap.dedent(GATE))
    (project / "pytest.ini").write_text(INI)
    proc = env.run("-m", "pytest", "-p", "no:cacheprovider", "-ra", "--adk-fail-on-orphans",
                   cwd=project)
    return proc.stdout + proc.stderr


def _shown(env: Env, path: Path) -> str:
    """``path`` as stacks.display_path shows a file of the install's site-packages."""
    return f"\u2026/{path.relative_to(env.site.parent)}"


def _stuck_at(env: Env) -> str:
    feed = env.site / "leaky_tools" / "__init__.py"
    line = _line_of(feed, 'async def stubborn_feed', 'STUCK HERE')
    return f"stuck at {_shown(env, feed)}:{line} in stubborn_feed"


def test_the_pytest_failure_names_the_installed_tool_line(env: Env, gate: str) -> None:
    assert "FAILED test_inner.py::test_own_plugin_leaks - 1 tool task orphaned" in gate, gate
    block = gate.split("_ test_own_plugin_leaks _", 1)[1].split("Captured log", 1)[0]
    assert _stuck_at(env) in block, block
    assert "asyncio/tasks.py" not in gate


def test_the_gate_on_a_plain_install_fails_a_leak_of_a_runner_without_a_plugin(
        env: Env, gate: str) -> None:
    assert "FAILED test_inner.py::test_no_plugin_leaks - 1 tool task orphaned" in gate, gate
    block = gate.split("_ test_no_plugin_leaks _", 1)[1].split("Captured log", 1)[0]
    assert "stubborn_feed call-feed (streaming): run ended by" in block, block
    assert _stuck_at(env) in block, block
    assert "opentelemetry.instrumentation" not in gate  # no "install the extra" warning
