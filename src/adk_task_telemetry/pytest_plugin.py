"""pytest plugin: fail an agent test that leaks a tool task (``--adk-fail-on-orphans``).

Loaded by the ``pytest11`` entry point wherever the package is installed, and inert
unless asked: without the option (or the ini ``adk_fail_on_orphans = true``) and the
``adk_tool_tasks`` fixture it adds no observer, no plugin on any Runner, no output.

With the option, every tool task orphaned during a test's setup, call or teardown
fails that phase's report, naming the tool, call id, run-end trigger and where the
task is stuck. Runners that list no ``TaskTelemetryPlugin`` get a shared one through
``runner_hook`` (it never doubles an app's own plugin; it needs no ``[instrument]``
extra, so every Runner is watched on a plain install too), and the engine's observers
(``observe.py``) tell this plugin of every task's end. Importing this module must stay
cheap: ADK is imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from . import observe
from .engine.records import TaskSeen, UnansweredCall
from .signals.stacks import innermost_user_frame

_TASKS = pytest.StashKey["ToolTasks"]()
_GATE = "adk-task-telemetry-gate"


class ToolTasks(list[TaskSeen]):
    """The tool tasks the plugin saw end (or orphaned) during one test, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.unanswered: list[UnansweredCall] = []  # calls left without a response
        self._told = 0  # orphans already put in a report

    @property
    def orphans(self) -> list[TaskSeen]:
        return [t for t in self if t.orphaned]

    def by_call_id(self, call_id: str) -> TaskSeen:
        """The one task of ``call_id``; KeyError if none, ValueError if several (a
        call id repeated across runs: filter the list instead)."""
        found = [t for t in self if t.call_id == call_id]
        if not found:
            raise KeyError(f"no tool task {call_id!r}; seen: {[t.call_id for t in self]}")
        if len(found) > 1:
            raise ValueError(f"{len(found)} tool tasks with call id {call_id!r}")
        return found[0]

    def outcomes(self) -> dict[str, str]:
        """call id -> outcome: the shortest readable assertion of a run's tasks."""
        return {t.call_id: t.outcome for t in self}

    def __repr__(self) -> str:
        return "ToolTasks([" + ", ".join(
            f"{t.tool_name} {t.call_id} {t.outcome}" + (f" ({t.cancel_cause})" if
                                                         t.cancel_cause else "")
            for t in self) + "])"

    def _add(self, seen: observe.Seen) -> None:
        if isinstance(seen, UnansweredCall):
            self.unanswered.append(seen)
        elif isinstance(seen, TaskSeen):
            self.append(seen)

    def _untold_orphans(self) -> list[TaskSeen]:
        orphans = self.orphans
        new, self._told = orphans[self._told:], len(orphans)
        return new


def describe(seen: TaskSeen) -> str:
    """One orphan, as a failed test names it."""
    frame = innermost_user_frame(seen.stacktrace) if seen.stacktrace else None
    where = f"stuck at {frame.where()}" if frame else "stuck at: no stack captured"
    code = f"\n        {frame.code}" if frame and frame.code else ""
    return (f"  {seen.tool_name} {seen.call_id} ({seen.kind}): run ended by {seen.trigger} "
            f"(app {seen.app_name}, invocation {seen.invocation_id})\n    {where}{code}")


class _Recorder:
    """The one observer: routes what the engine reports to the test running now.
    It and the Runner hook are installed while anyone uses them (gate or fixture)."""

    def __init__(self) -> None:
        self.current: ToolTasks | None = None
        self.stray: ToolTasks = ToolTasks()  # seen while no test ran
        self._users = 0
        self._hook: Any = None  # set while our hook, not the user's, adds the plugin
        self._plugin: Any = None  # the shared plugin, created when a Runner needs one

    def __call__(self, seen: observe.Seen) -> None:
        (self.current if self.current is not None else self.stray)._add(seen)

    def acquire(self) -> None:
        self._users += 1
        if self._users == 1:
            observe.add_observer(self)
            self._install_hook()

    def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            observe.remove_observer(self)
            if self._hook is not None:
                self._hook.uninstall()
                self._hook = None

    def _install_hook(self) -> None:
        """Gives every Runner without its own TaskTelemetryPlugin the shared one,
        unless the user's code hooks Runners already (the instrumentor: theirs)."""
        from . import runner_hook

        if runner_hook.is_hooked():
            return
        self._hook = runner_hook.RunnerHook(self._shared_plugin)
        self._hook.install()

    def _shared_plugin(self) -> Any:
        if self._plugin is None:
            from .plugin import TaskTelemetryPlugin

            self._plugin = TaskTelemetryPlugin()
        return self._plugin

    def switch(self, tasks: ToolTasks | None) -> ToolTasks | None:
        previous, self.current = self.current, tasks
        return previous


_recorder = _Recorder()


class _OrphanFailure:
    """A report's longrepr naming the orphans; ``reprcrash.message`` is what the
    short summary (``-ra``) and junitxml show."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.reprcrash = _Crash(text.splitlines()[0])

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line, red=line.startswith("  ") and not line.startswith("    "))

    def __str__(self) -> str:
        return self.text


class _Crash:
    def __init__(self, message: str) -> None:
        self.message = message


class _Gate:
    """Registered only with the option: records each test and fails its leaks."""

    def __init__(self) -> None:
        _recorder.acquire()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        previous = _recorder.switch(item.stash.setdefault(_TASKS, ToolTasks()))
        try:
            return (yield)
        finally:
            _recorder.switch(previous)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None],
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report: pytest.TestReport = yield
        orphans = item.stash[_TASKS]._untold_orphans() if _TASKS in item.stash else []
        if orphans:
            n = len(orphans)
            names = ", ".join(f"{t.tool_name} {t.call_id}" for t in orphans)
            text = "\n".join([f"{n} tool task{'s' * (n > 1)} orphaned during {report.when}: "
                              f"{names}", *map(describe, orphans),
                              "(adk-task-telemetry --adk-fail-on-orphans: a tool task still "
                              "running when its run ended)"])
            if report.failed:  # keep the test's own error; add the note beside it
                report.sections.append((f"adk-task-telemetry: orphaned tool tasks "
                                        f"({report.when})", text))
            else:
                report.outcome = "failed"
                report.longrepr = _OrphanFailure(text)  # type: ignore[assignment]
                if hasattr(report, "wasxfail"):
                    del report.wasxfail  # the leak is not the failure it expected
        return report

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _recorder.stray.orphans:
            terminalreporter.section("adk-task-telemetry: tool tasks orphaned outside any test")
            for seen in _recorder.stray.orphans:
                terminalreporter.line(describe(seen))

    def pytest_unconfigure(self) -> None:
        _recorder.release()


def pytest_addoption(parser: pytest.Parser) -> None:
    help_ = ("fail a test during which an ADK tool task was orphaned (still running "
             "when its run ended)")
    parser.getgroup("adk-task-telemetry").addoption(
        "--adk-fail-on-orphans", action="store_true", default=False, help=help_)
    parser.addini("adk_fail_on_orphans", help_, type="bool", default=False)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("adk_fail_on_orphans") or config.getini("adk_fail_on_orphans"):
        config.pluginmanager.register(_Gate(), _GATE)


@pytest.fixture
def adk_tool_tasks(request: pytest.FixtureRequest) -> Iterator[ToolTasks]:
    """The tool tasks seen ending during this test (each a ``records.TaskSeen``):
    ``.orphans``, ``.by_call_id(id)``, ``.outcomes()``, ``.unanswered``. Works with
    or without ``--adk-fail-on-orphans``."""
    if request.config.pluginmanager.has_plugin(_GATE):
        yield request.node.stash[_TASKS]  # the gate records the whole test already
        return
    tasks = ToolTasks()
    _recorder.acquire()
    previous = _recorder.switch(tasks)
    try:
        yield tasks
    finally:
        _recorder.switch(previous)
        _recorder.release()
