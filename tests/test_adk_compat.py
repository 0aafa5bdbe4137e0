"""Each feature probe in adk_compat gives the answer bisected on every ADK minor.

adk_compat never reads the version number; this test does, as the oracle: the
minors where each feature appears were found by reading each release and running
the scenario corpus on it (`make matrix`, docs/versions.md).
"""

from __future__ import annotations

import logging

import pytest

from adk_task_telemetry import TaskTelemetryPlugin
from adk_task_telemetry import adk_compat as compat
from adk_task_telemetry.testing import fresh_adk_notes

V = compat.ADK_VERSION

#: probe -> whether the installed ADK has it, by the bisected minors.
EXPECTED: dict[str, bool] = {
    "agent_tool_keeps_app_name": V >= (1, 17, 0),
    "runner_closes_plugins": V >= (1, 19, 0),
    "live_calls_run_plugin_callbacks": V >= (1, 27, 0),
    "failed_call_cancels_siblings": V >= (1, 32, 0),
    "stop_background_tool_tasks": (1, 39, 0) <= V < (2, 0, 0) or (2, 8, 0) <= V < (2, 11, 0),
    "live_teardown_cancels_background_tools": (1, 39, 0) <= V < (2, 0, 0) or V >= (2, 8, 0),
    "live_run_has_own_task": V >= (2, 8, 0),
    "live_run_end_hook": V < (2, 8, 0),
    "live_tool_hook": V < (1, 27, 0),
    "live_send_loop_polls": V < (1, 22, 0),
    "node_runtime": V >= (2, 0, 0),
    "run_error_callback": V >= (2, 5, 0),
    "abort_signal": V >= (2, 11, 0),
    "background_tool_registry": V >= (2, 13, 0),
    "tool_thread_pool": V >= (1, 24, 0),
    "run_async_tool_thread_pool": V >= (2, 11, 0),
}


@pytest.mark.skipif(compat.is_newer_than_tested(), reason=(
    "google-adk is newer than the newest tested: the oracle does not know it yet"))
def test_each_probe_matches_the_bisected_minor() -> None:
    got = compat.features()
    assert set(got) == set(EXPECTED)
    wrong = {k: got[k] for k in EXPECTED if got[k] != EXPECTED[k]}
    assert wrong == {}, f"google-adk {compat.ADK_VERSION_STRING}: probes disagree"


def test_newer_adk_is_noted_once(caplog: pytest.LogCaptureFixture) -> None:
    with fresh_adk_notes(installed="99.0.0"), caplog.at_level(
            logging.INFO, logger="adk_task_telemetry"):
        TaskTelemetryPlugin()  # each plugin notes it at construction: once per process
        TaskTelemetryPlugin()
        compat.note_untested_adk()
    notes = [r for r in caplog.records if "newer than the newest tested" in r.getMessage()]
    assert len(notes) == 1
    assert "99.0.0" in notes[0].getMessage() and compat.NEWEST_TESTED_ADK in notes[0].getMessage()


def test_tested_adk_is_not_noted(caplog: pytest.LogCaptureFixture) -> None:
    with fresh_adk_notes(installed=compat.NEWEST_TESTED_ADK), caplog.at_level(
            logging.INFO, logger="adk_task_telemetry"):
        compat.note_untested_adk()
    assert not [r for r in caplog.records if "newer than" in r.getMessage()]


def test_newest_tested_is_the_makefiles_newest() -> None:
    from pathlib import Path
    makefile = Path(__file__).resolve().parent.parent / "Makefile"
    line = next(x for x in makefile.read_text().splitlines() if x.startswith("ADK_VERSIONS "))
    assert line.split("=", 1)[1].split()[0] == compat.NEWEST_TESTED_ADK


def test_the_version_table_matches_the_bisected_minors() -> None:
    """``HOLDS_ON`` (the one owner of the version ranges: docs/versions.md is generated
    from it, the source-less answers are read from it) agrees with the oracle above on
    the installed release, for every probe."""
    assert set(compat.HOLDS_ON) == set(EXPECTED)
    got = {probe: compat.holds(probe, V) for probe in EXPECTED}
    assert got == EXPECTED, f"google-adk {compat.ADK_VERSION_STRING}"


def test_holds_reads_each_range_form() -> None:
    """The range forms the table uses, on releases around their edges."""
    assert compat.holds("live_run_end_hook", (1, 14, 1))
    assert compat.holds("live_run_end_hook", (1, 39, 1))
    assert compat.holds("live_run_end_hook", (2, 7, 1))
    assert not compat.holds("live_run_end_hook", (2, 8, 0))
    assert compat.holds("stop_background_tool_tasks", (1, 39, 0))
    assert not compat.holds("stop_background_tool_tasks", (1, 38, 0))
    assert not compat.holds("stop_background_tool_tasks", (2, 11, 0))
    assert compat.holds("background_tool_registry", compat.parse_version(
        compat.ISSUE_7058_FIXED_IN))
    assert not compat.holds("no_such_probe", (9, 9, 9))


def test_oldest_supported_is_pyprojects_bound() -> None:
    from pathlib import Path
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    bound = next(x for x in pyproject.read_text().splitlines()
                 if x.strip().startswith('"google-adk>='))
    lowest = bound.split(">=", 1)[1].split('"')[0]
    assert compat.parse_version(lowest) == compat.parse_version(compat.OLDEST_SUPPORTED_ADK)


def test_the_compat_package_has_no_cycle() -> None:
    """Inside ``adk_compat`` each module imports only modules that do not import it
    back, at import time or in a function (tests/test_layers.py's reader)."""
    from .test_layers import SRC, imports_of
    package = SRC / "adk_compat"
    deps = {f"adk_compat.{p.stem}": {d for d in imports_of(p) if d.startswith("adk_compat.")}
            for p in package.glob("*.py") if p.stem != "__init__"}
    assert len(deps) >= 7
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for dep in deps.get(module, ()):
            visit(dep, (*path, module))
        done.add(module)

    for module in deps:
        visit(module, ())


def test_fresh_notes_put_the_state_back(caplog: pytest.LogCaptureFixture) -> None:
    """A note made inside ``fresh_adk_notes`` does not count for the process: the
    next block makes it again."""
    for _ in range(2):
        with fresh_adk_notes(installed="99.0.0"), caplog.at_level(
                logging.INFO, logger="adk_task_telemetry"):
            compat.note_untested_adk()
    notes = [r for r in caplog.records if "newer than the newest tested" in r.getMessage()]
    assert len(notes) == 2
