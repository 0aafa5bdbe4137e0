"""Where an orphan is stuck, read back from ``code.stacktrace``: which frame is the user's.

The user's code is anything but the standard library, ADK, google-genai and
OpenTelemetry, wherever it is installed: a tool in a virtualenv's site-packages (the
user's own wheel, a toolkit library) is the user's, although a virtualenv's
``lib/python3.X`` (sysconfig's ``platstdlib``) holds that site-packages.
tests/test_installed_package.py checks the same on a real install end to end.
"""

from __future__ import annotations

import asyncio
import os
import sysconfig

import pytest

from adk_task_telemetry.signals.stacks import innermost_user_frame, is_framework_path

SITE = sysconfig.get_paths()["purelib"]  # this interpreter's (a venv's, in the suite)
ASYNCIO = os.path.dirname(asyncio.__file__)


def _stack(*files: str) -> str:
    return "".join(f'  File "{f}", line {i + 10}, in f{i}\n    await x()\n'
                   for i, f in enumerate(files))


@pytest.mark.parametrize("tool", [
    f"{SITE}/acme_tools/search.py",  # the user's wheel in this venv
    "/opt/app/.venv/lib/python3.12/site-packages/acme_tools/search.py",  # captured elsewhere
    "/usr/lib/python3/dist-packages/acme_tools/search.py",  # a distro's package
    "/home/u/.local/lib/python3.11/site-packages/acme_tools/search.py",  # user site
    "/srv/app/tools.py",  # a source tree
])
def test_the_tool_frame_is_the_innermost_user_frame(tool: str) -> None:
    stack = _stack(f"{SITE}/google/adk/flows/llm_flows/functions.py", tool,
                   f"{SITE}/opentelemetry/trace/__init__.py",
                   f"{SITE}/google/genai/models.py", f"{ASYNCIO}/tasks.py")
    frame = innermost_user_frame(stack)
    assert frame is not None and frame.file == tool, frame


@pytest.mark.parametrize("path", [
    f"{ASYNCIO}/tasks.py",
    f"{sysconfig.get_paths()['stdlib']}/contextlib.py",
    "/usr/lib/python3.12/asyncio/tasks.py",  # a stack captured by another interpreter
    f"{SITE}/google/adk/runners.py",
    "/opt/app/.venv/lib/python3.12/site-packages/opentelemetry/sdk/trace/__init__.py",
    "/home/dev/adk-python/src/google/adk/flows/llm_flows/functions.py",  # ADK from source
    "<frozen importlib._bootstrap>",
])
def test_framework_frames(path: str) -> None:
    assert is_framework_path(path)


def test_all_framework_falls_back_to_the_innermost_frame() -> None:
    frame = innermost_user_frame(_stack(f"{SITE}/google/adk/x.py", f"{ASYNCIO}/tasks.py"))
    assert frame is not None and frame.file == f"{ASYNCIO}/tasks.py"
