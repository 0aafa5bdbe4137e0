"""The package's layers look only down: a module imports its own layer or lower ones,
at import time and inside functions alike (TYPE_CHECKING imports included: a type that
names a higher layer is knowledge of it).

Read from the source with ``ast``, so an import hidden in a function counts. An import
of ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so each is counted as
imported too (the check follows package ``__init__``s): ``from .configure import
settings`` loads ``configure/__init__``, with its providers and exporters. The layers
are the package's folders (docs/architecture.md draws them, tests/test_architecture.py
holds the page to this file): ``signals/`` below ``lifecycle/`` below ``engine/``; the
engine's data (``engine.records``) is the one module of the engine the signals read.
That reporters never call back into the engine is tests/test_no_callbacks.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "adk_task_telemetry"

#: Bottom first: (name, modules). A module is named as in LAYERS (dotted, without the
#: package's own name); a folder's modules are listed one by one, so that a module added
#: to a folder is placed on purpose. A module not listed fails the test.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("facts", ("semconv", "version", "variables", "otel_compat", "plugin_options",
               "scenarios.model")),
    ("adk_compat", ("adk_compat.versions", "adk_compat.probes", "adk_compat.notes",
                    "adk_compat.access", "adk_compat.signals", "adk_compat.ledger",
                    "adk_compat.live_path", "adk_compat.thread_pool", "adk_compat")),
    # the engine's package __init__ imports nothing: importing the records loads no more
    ("engine data", ("engine", "engine.records")),
    ("signals", ("signals", "signals.stacks", "signals.capture", "signals.metrics",
                 "signals.span_processors", "signals.task_spans", "signals.orphan_report",
                 "signals.ledger_report", "signals.pool_metrics", "observe")),
    ("lifecycle", ("lifecycle", "lifecycle.flush_worker", "lifecycle.process_exit",
                   "lifecycle.close_flush")),
    ("engine", ("engine.run_index", "engine.run_drivers", "engine.pool_calls",
                "engine.strict_mode", "engine.trackers", "engine.stuck_sweep", "engine.run_end",
                "engine.run_book", "engine.tracker")),
    ("plugin", ("plugin_order", "debug_endpoint", "plugin")),
    ("configure", ("configure.outage", "configure.settings", "configure.bridge",
                   "configure.prometheus", "configure.otlp_exporters", "configure.buffer",
                   "configure.export", "configure.sdk_side", "configure.providers",
                   "configure.handle", "configure")),
    ("process hooks", ("runner_hook", "instrumentation", "pytest_plugin")),
    ("applications", ("scenarios.probe", "scenarios.tools", "scenarios.runs",
                      "scenarios.library", "scenarios", "cli.results", "cli.wording",
                      "cli.readback", "cli.terminal", "cli.report_html", "cli.audit_json",
                      "cli.harness", "cli.demo_otlp", "cli.commands", "cli.tasks", "cli.dispatch",
                      "cli.__main__", "cli", "testing", "")),
)
_LEVEL = {m: i for i, (_, layer) in enumerate(LAYERS) for m in layer}

#: What each folder (or top-level module) may never import, beyond "only down": a module
#: named, or any module under it (a package's ``__init__`` included).
NEVER: dict[str, tuple[str, ...]] = {
    # a signal is called with what it needs: it reads the engine's data, nothing more
    "signals": ("engine", "lifecycle", "configure", "plugin"),
    "engine": ("configure", "plugin"),
    "lifecycle": ("engine", "signals", "configure", "plugin"),
    # the plugin stands on the engine: configure/ (the SDK's layer) is not loaded by it
    "plugin": ("configure",),
    "plugin_options": ("configure",),
}
#: The imports NEVER allows of a forbidden name: the signals read the records (and so
#: load engine/__init__, which imports nothing).
ALLOWED = {("signals", "engine"), ("signals", "engine.records")}


def _name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str, src: Path) -> bool:
    base = src.joinpath(*module.split(".")) if module else src
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _with_packages(module: str) -> set[str]:
    """``module`` and every package ``__init__`` that importing it runs first."""
    parts = module.split(".") if module else []
    return {".".join(parts[:i]) for i in range(len(parts) + 1)}


def imports_of(path: Path, name: str | None = None, src: Path = SRC) -> set[str]:
    """Every module of ours that ``path`` (the module ``name``) loads by its own imports,
    anywhere in it: each imported module and the package ``__init__``s above it (the
    package's own ``__init__``, and those of the importer's own packages, which are
    loaded before it, left out)."""
    name = _name(path, src) if name is None else name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "adk_task_telemetry":
                    found |= _with_packages(
                        alias.name.removeprefix("adk_task_telemetry").lstrip("."))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").split(".")[0] != "adk_task_telemetry":
                    continue
                base = (node.module or "").removeprefix("adk_task_telemetry").lstrip(".")
            else:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            found |= _with_packages(base)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if _exists(sub, src):
                    found.add(sub)
    return found - _with_packages(package) - {name}


def _folder(module: str) -> str:
    return module.split(".")[0]


MODULES = sorted(SRC.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(_name(p) for p in MODULES if _name(p) not in _LEVEL)
    assert not unplaced, f"place these modules in tests/test_layers.py LAYERS: {unplaced}"
    gone = sorted(m for m in _LEVEL if not _exists(m, SRC))
    assert not gone, f"LAYERS names modules that do not exist: {gone}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_a_module_imports_only_its_layer_or_lower(path: Path) -> None:
    me = _name(path)
    if me not in _LEVEL:
        pytest.fail(f"{me} has no layer")
    upward = sorted(f"{dep} ({LAYERS[_LEVEL[dep]][0]})" for dep in imports_of(path)
                    if _LEVEL.get(dep, -1) > _LEVEL[me])
    assert not upward, f"{me} ({LAYERS[_LEVEL[me]][0]}) imports a higher layer: {upward}"


def forbidden_imports(src: Path = SRC) -> list[str]:
    """Every import that NEVER forbids, as ``importer -> imported``, read under ``src``
    (any layout: a module's folder, or its own name at the top level, picks its rule)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        me = _name(path, src)
        key = _folder(me)
        for dep in sorted(imports_of(path, me, src)):
            if (key, dep) in ALLOWED or _folder(dep) == key:
                continue
            if any(dep == bad or dep.startswith(bad + ".") for bad in NEVER.get(key, ())):
                found.append(f"{me} -> {dep}")
    return found


def test_signals_never_import_the_engine_nor_any_layer_import_configure() -> None:
    """signals/ read only the engine's data; the engine, the signals, the lifecycle and
    the plugin never load configure/ (through a package ``__init__`` either)."""
    assert forbidden_imports() == []


def test_importing_the_plugin_loads_no_configure_and_no_sdk_provider_or_exporter() -> None:
    """In a fresh interpreter: the engine stands on the OpenTelemetry API. What the plugin
    needs of the SDK (``opentelemetry.sdk.trace``: the span processor's base class) may
    load; the SDK's metrics and logs providers and every exporter may not."""
    code = ("import json, sys\nimport adk_task_telemetry.plugin\n"
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                       text=True, check=True).stdout)
    bad = [m for m in loaded if m.startswith((
        "adk_task_telemetry.configure", "opentelemetry.sdk.metrics", "opentelemetry.sdk._logs",
        "opentelemetry.exporter"))]
    assert bad == []
    assert "adk_task_telemetry.engine.tracker" in loaded  # the check saw the engine load


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The reader itself can fail: an upward import in a function body is found."""
    fake = tmp_path / "records.py"
    fake.write_text((SRC / "engine" / "records.py").read_text()
                    + "\n\ndef _late() -> None:\n    from . import tracker\n")
    assert "engine.tracker" in imports_of(fake, "engine.records")
    assert "engine.tracker" not in imports_of(SRC / "engine" / "records.py")


def test_the_check_follows_package_inits(tmp_path: Path) -> None:
    """The reader itself can fail: importing a module of a package counts the package's
    ``__init__`` (here configure/'s, which builds providers), and the rule sees it."""
    fake = tmp_path / "plugin.py"
    fake.write_text("from .configure import settings\n")
    assert {"configure", "configure.settings"} <= imports_of(fake, "plugin")
    src = tmp_path / "src"
    (src / "signals").mkdir(parents=True)
    (src / "signals" / "__init__.py").write_text("")
    (src / "signals" / "fake.py").write_text("from ..engine import tracker\n"
                                             "from ..engine.records import TaskRecord\n")
    (src / "engine").mkdir()
    (src / "engine" / "__init__.py").write_text("")
    (src / "engine" / "tracker.py").write_text("")
    (src / "engine" / "records.py").write_text("")
    assert forbidden_imports(src) == ["signals.fake -> engine.tracker"]
