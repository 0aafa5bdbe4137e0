"""Data and reporters never call back into the engine (issue 25).

tests/test_layers.py proves that no module imports a higher layer; an object handed
down can still be called back. This reads the source with ``ast``: no module below the
tracker calls a method of a ``Tracker`` (tracker.py's class or its base, run_book.py's
``RunBook``), on whatever object it was given, and none declares a Protocol of the
tracker's methods. The one exception is the issue's own
design: a record is the done-callback of its task and hands itself to
``records.RecordOwner`` (declared beside the records, two methods), so that the tracker
needs no closure per task.

What this does not see: a plain callable handed down and called (``span_processors.watch_end``'s
callback, the observers of ``observe``); those are subscriptions the caller chose, named
in their docstrings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "adk_task_telemetry"

#: Data and reporters (below the tracker in tests/test_layers.py LAYERS).
BELOW_THE_TRACKER = ("engine/records", "signals/metrics", "signals/span_processors",
                     "signals/stacks", "observe", "signals/ledger_report",
                     "signals/orphan_report", "engine/strict_mode", "signals/pool_metrics")
#: records.RecordOwner: a task's done-callback (the record) hands the record on.
ALLOWED = {"engine/records": {"task_done", "driver_done"}}


#: The tracker's class and the base class it is built on (its books and run verbs).
TRACKER_CLASSES = ((SRC / "engine" / "tracker.py", "Tracker"),
                   (SRC / "engine" / "run_book.py", "RunBook"))


def tracker_methods() -> set[str]:
    """Every method a ``Tracker`` has of its own classes (``__init__`` aside)."""
    found: set[str] = set()
    for path, name in TRACKER_CLASSES:
        classes = [node for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.ClassDef) and node.name == name]
        assert classes, f"no class {name} in {path}"
        found |= {f.name for f in classes[0].body
                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return found - {"__init__"}


def callbacks_in(path: Path, methods: set[str]) -> list[str]:
    """Where ``path`` calls one of ``methods`` on an object, or declares a Protocol with
    one of them: ``name (line N)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods):
            found.append(f"{node.func.attr} (line {node.lineno})")
        elif isinstance(node, ast.ClassDef) and any(
                (b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) == "Protocol"
                for b in node.bases):
            found.extend(f"{node.name}.{f.name} (line {f.lineno})" for f in node.body
                         if isinstance(f, ast.FunctionDef) and f.name in methods)
    return found


def _method_names(found: list[str]) -> set[str]:
    return {f.split(" ")[0].rpartition(".")[2] for f in found}


@pytest.mark.parametrize("module", BELOW_THE_TRACKER)
def test_data_and_reporters_never_call_the_tracker(module: str) -> None:
    found = callbacks_in(SRC / f"{module}.py", tracker_methods())
    extra = _method_names(found) - ALLOWED.get(module, set())
    assert not extra, (f"{module} calls back into the tracker: "
                       f"{[f for f in found if _method_names([f]) & extra]}")


def test_the_check_sees_a_call_through_a_handed_object(tmp_path: Path) -> None:
    """The reader itself can fail: a reporter that calls a tracker verb on the object
    it was handed, or declares a Protocol of them, is found."""
    fake = tmp_path / "strict.py"
    fake.write_text((SRC / "engine" / "strict_mode.py").read_text() + (
        "\n\nclass Owner(Protocol):\n    def orphan(self) -> None: ...\n"
        "\n\ndef _late(owner: Owner) -> None:\n    owner.run_ended()\n"))
    found = _method_names(callbacks_in(fake, tracker_methods()))
    assert {"orphan", "run_ended"} <= found
    assert not _method_names(callbacks_in(SRC / "engine" / "strict_mode.py", tracker_methods()))
