"""The repository's tools/*.py scripts as modules, for the tests that check what they
render (they are scripts, not a package: loaded by path, once per test process)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


@cache
def load_tool(name: str) -> ModuleType:
    """tools/<name>.py, registered in ``sys.modules`` before it runs: its dataclasses
    look their module up there."""
    path = REPO / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
