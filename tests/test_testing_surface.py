"""adk_task_telemetry.testing keeps what its docstring promises: importing it installs
nothing, every name it exports is there, and unconfigured() puts the process's own
set-up back."""

from __future__ import annotations

import subprocess
import sys

from adk_task_telemetry import configure, testing


def test_every_exported_name_exists() -> None:
    assert testing.__all__, "the module exports nothing"
    assert [n for n in testing.__all__ if not hasattr(testing, n)] == []


def test_importing_it_installs_no_provider() -> None:
    code = ("from opentelemetry import trace, metrics\n"
            "import adk_task_telemetry.testing\n"
            "print(type(trace.get_tracer_provider()).__name__,"
            " type(metrics.get_meter_provider()).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["ProxyTracerProvider", "_ProxyMeterProvider"], out.stdout


def test_unconfigured_sets_the_active_handle_aside_and_puts_it_back() -> None:
    before = configure.active()
    with testing.unconfigured():
        assert configure.active() is None
        handle = configure.configure_telemetry(disabled=True)
        assert configure.active() is handle
    assert configure.active() is before
    handle.shutdown()
