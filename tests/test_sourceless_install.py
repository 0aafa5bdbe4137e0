"""An install of google-adk without source files: ``.pyc`` only (``compileall -b`` and
the ``.py`` files removed, as slim images and some bundlers do).

Some feature probes read ADK's source. Without it they used to flip silently (on
1.20.0: ``live_tool_hook`` off, ``live_calls_run_plugin_callbacks`` on, two more),
and the plugin then saw no live tool task at all: the seed bug's orphans got no span
and ``audit -s seed_bug`` said PASS having watched nothing. Here the running
interpreter's own google-adk is copied to a temporary directory, compiled and
stripped of its sources, and put first on a subprocess's path: the probes must give
the answers they give with the source (the release's recorded facts), say so once,
and the seed bug must be reported as with the source.
"""

from __future__ import annotations

import ast
import compileall
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import google.adk
import pytest

import adk_task_telemetry
from adk_task_telemetry import adk_compat, cli
from adk_task_telemetry.cli.results import Result

PACKAGE = Path(adk_task_telemetry.__file__).resolve().parent


@pytest.fixture(scope="module")
def sourceless(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``google/adk`` as ``.pyc`` files only: the installed ADK
    (the very version under test), compiled in place (``-b``) and its ``.py`` removed."""
    root = tmp_path_factory.mktemp("sourceless")
    adk_dir = Path(google.adk.__file__).resolve().parent
    target = root / "google" / "adk"
    # (Some wheels carry macOS resource forks, ``._name.py``: not Python, not imported.)
    shutil.copytree(adk_dir, target, ignore=shutil.ignore_patterns("__pycache__", "._*"))
    assert compileall.compile_dir(str(target), quiet=1, legacy=True)
    for source in target.rglob("*.py"):
        source.unlink()
    return root


def _run(root: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python args...`` with the source-less copy (``root``) first on the path, then
    the package under test; ``root`` None: the installed ADK, with its source."""
    path = [str(PACKAGE.parent), *filter(None, os.environ.get("PYTHONPATH", "").split(
        os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), *path] if root is not None else path)}
    return subprocess.run([sys.executable, *args], env=env, text=True, capture_output=True,
                          timeout=300, stdin=subprocess.DEVNULL)


_FEATURES = """
import inspect, json, logging
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("adk_task_telemetry").addHandler(Keep())
import google.adk
from google.adk.flows.llm_flows import functions
from adk_task_telemetry import adk_compat
from adk_task_telemetry.plugin import TaskTelemetryPlugin
try:
    inspect.getsource(functions)
    has_source = True
except OSError:
    has_source = False
plugins = [TaskTelemetryPlugin(), TaskTelemetryPlugin()]
print(json.dumps({"adk": google.adk.__file__, "has_source": has_source,
                  "features": adk_compat.features(),
                  "without_source": adk_compat.decided_without_source(),
                  "notes": [m for m in records if "without its source files" in m]}))
"""


def _features(root: Path | None) -> dict[str, Any]:
    done = _run(root, "-c", _FEATURES)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_probes_answer_as_with_source(sourceless: Path) -> None:
    """Every probe gives the answer it gives with ADK's source; the ones that could
    not read it say so in one log record however many plugins are made."""
    with_source = _features(None)
    without = _features(sourceless)
    assert with_source["has_source"] and not with_source["without_source"]
    assert not without["has_source"], "the copy still has source: the test proves nothing"
    assert without["adk"].startswith(str(sourceless))
    assert without["features"] == with_source["features"]
    assert without["without_source"], "no probe noticed the missing source"
    assert len(without["notes"]) == 1, without["notes"]
    for probe, answer in without["without_source"].items():
        assert without["features"][probe] is answer or probe == "live_tool_hook"
    assert not with_source["notes"]


def _audit(root: Path | None) -> tuple[int, dict[str, Any]]:
    done = _run(root, "-m", "adk_task_telemetry.cli", "audit", "--json", "-s", "seed_bug")
    assert done.returncode in (cli.EXIT_OK, cli.EXIT_ORPHANED, cli.EXIT_FAILED), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_seed_bug_reported_without_source(sourceless: Path) -> None:
    """The seed bug's live calls are seen, and its orphans reported, exactly as with
    the source (two orphans on 1.14 to 1.38, one on 1.39 and 2.8 to 2.12, none on
    2.13): never PASS having seen no task."""
    code, doc = _audit(sourceless)
    ref_code, ref = _audit(None)
    assert ref["totals"]["started"] > 0
    assert doc["totals"]["started"] == ref["totals"]["started"], doc["scenarios"][0]
    assert doc["totals"]["orphaned"] == ref["totals"]["orphaned"]
    assert sorted(o["call_id"] for o in doc["scenarios"][0]["orphans"]) == sorted(
        o["call_id"] for o in ref["scenarios"][0]["orphans"])
    assert (code, doc["verdict"]) == (ref_code, ref["verdict"])


def test_audit_fails_when_the_plugin_saw_no_task() -> None:
    """The audit's gate: a scenario whose tools ran calls, of which the plugin saw none
    start, fails (exit code 3), whatever else it saw."""
    why = cli.unseen_calls(["call-goog", "call-msft"], 0)
    assert why is not None and "2 calls" in why and "call-goog" in why
    assert cli.unseen_calls(["call-goog"], 1) is None
    assert cli.unseen_calls([], 0) is None
    blind = Result("seed_bug", "", "live", 0.1, failure=why)
    doc = cli.audit_document([blind])
    assert (doc["verdict"], doc["exit_code"]) == ("failed", cli.EXIT_FAILED)
    assert doc["scenarios"][0]["failure"] == why


def _calls_named(tree: ast.AST, names: set[str]) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr in names)
        or (isinstance(node.func, ast.Name) and node.func.id in names))]


#: The inspect functions that read source files (each fails on a ``.pyc``-only install).
SOURCE_READERS = {"getsource", "getsourcelines", "findsource", "getsourcefile", "getcomments"}


def test_no_probe_reads_source_without_a_fallback() -> None:
    """Source is read in the compat layer's probes only (where every probe lives), there
    in one function only, ``_source_probe``, whose every caller names a probe with a
    recorded fact to fall back on; and each such probe is one of ``features()``."""
    probes_py = PACKAGE / "adk_compat" / "probes.py"
    for module in sorted(PACKAGE.rglob("*.py")):
        if module != probes_py:
            assert not _calls_named(ast.parse(module.read_text()), SOURCE_READERS), module.name
    tree = ast.parse(probes_py.read_text())
    readers = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)}
    for name, fn in readers.items():
        if name != "_source_probe":
            assert not _calls_named(fn, SOURCE_READERS), f"{name} reads ADK's source"
    assert _calls_named(readers["_source_probe"], SOURCE_READERS)
    module_level = [n for n in tree.body if not isinstance(n, ast.FunctionDef)]
    for node in module_level:
        assert not _calls_named(node, SOURCE_READERS), ast.unparse(node)
    probes = _calls_named(tree, {"_source_probe"})
    assert len(probes) >= 5
    for call in probes:
        first = call.args[0]
        assert isinstance(first, ast.Constant), ast.unparse(call)
        assert first.value in adk_compat.KNOWN_FACTS, first.value
        assert first.value in adk_compat.features()
