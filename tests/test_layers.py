"""The package's layers look only down: a module imports its own layer or lower ones,
at import time and inside functions alike (TYPE_CHECKING imports included: a type that
names a higher layer is knowledge of it).

Read from the source with ``ast``, so an import hidden in a function counts. Records are
data and hold a small Protocol the tracker implements (``records.RecordOwner``), not an
import of it; that reporters never call back into the engine is tests/test_no_callbacks.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "adk_task_telemetry"

#: Bottom first. A module not listed fails the test: place it when you add it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # facts with no dependency of ours
    ("semconv", "version", "privacy", "stacks", "otel_compat", "configure.variables",
     "configure.outage", "scenarios.model"),
    # what ADK and OpenTelemetry are, the settings, and the data
    ("adk_compat.versions", "adk_compat.probes", "adk_compat.access", "adk_compat.signals",
     "adk_compat.ledger", "adk_compat.notes", "adk_compat.live_path", "adk_compat.thread_pool",
     "adk_compat",
     "records", "metrics", "spans", "flush_worker", "exit", "close_flush", "plugin_order",
     "configure.settings"),
    # reporters: they read records and write telemetry; they never call the engine
    ("observe", "calls", "orphans", "strict", "pool_metrics"),
    # the engine's parts that change no state: spans, run index, drivers, threads, exit
    ("task_spans", "runindex", "drivers", "threadwork", "registry", "stuck", "debug_endpoint"),
    # the engine
    ("tracker",),
    # ADK's side of it
    ("plugin",),
    # the process around it: export set-up, the Runner hook, the instrumentor, pytest
    ("configure.bridge", "configure.otlp", "configure.prometheus", "configure.buffer",
     "configure.export", "configure.handover", "configure.providers", "configure.handle",
     "configure",
     "runner_hook", "instrumentation", "pytest_plugin"),
    # applications of it: the scenario library, the CLI and its views, the package face
    ("scenarios.probe", "scenarios.library", "scenarios", "cli.results", "cli.wording",
     "cli.readback", "cli.terminal", "cli.report_html", "cli.audit_json", "cli.harness",
     "cli.otlp", "cli.commands", "cli.tasks", "cli.dispatch", "cli.__main__", "cli", "testing", ""),
)
_LEVEL = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def _name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    base = SRC.joinpath(*module.split(".")) if module else SRC
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, name: str | None = None) -> set[str]:
    """Every module of ours that ``path`` (the module ``name``) imports, anywhere in it."""
    name = _name(path) if name is None else name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("adk_task_telemetry"):
                    found.add(alias.name.removeprefix("adk_task_telemetry").lstrip("."))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith("adk_task_telemetry"):
                    continue
                base = (node.module or "").removeprefix("adk_task_telemetry").lstrip(".")
            else:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                found.add(sub if _exists(sub) else base)
    found.discard(name)
    return found


MODULES = sorted(SRC.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(_name(p) for p in MODULES if _name(p) not in _LEVEL)
    assert not unplaced, f"place these modules in tests/test_layers.py LAYERS: {unplaced}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_a_module_imports_only_its_layer_or_lower(path: Path) -> None:
    me = _name(path)
    if me not in _LEVEL:
        pytest.fail(f"{me} has no layer")
    upward = sorted(f"{dep} (layer {_LEVEL[dep]})" for dep in imports_of(path)
                    if _LEVEL.get(dep, -1) > _LEVEL[me])
    assert not upward, f"{me} (layer {_LEVEL[me]}) imports a higher layer: {upward}"


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The reader itself can fail: an upward import in a function body is found."""
    fake = tmp_path / "records.py"
    fake.write_text((SRC / "records.py").read_text()
                    + "\n\ndef _late() -> None:\n    from . import tracker\n")
    assert "tracker" in imports_of(fake, "records")
    assert "tracker" not in imports_of(SRC / "records.py")
