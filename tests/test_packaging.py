"""The sdist and wheel a user installs, built from a clean clone of HEAD as a release is.

A clone holds only what is committed, so a file the package needs that git does not track
fails here rather than on PyPI. Offline: the build uses this venv's hatchling
(``--no-isolation``, the dev extra), and the checks are twine's and mypy's own.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DIST = "adk_task_telemetry"
# The interpreter CI's `make test` runs the full suites on (a fresh Debian with Python
# 3.11, README); the Makefile's PYTHONS and EXIT_PYTHONS are the others it tests.
MAIN_PYTHON = "3.11"
ENTRY_POINTS = {
    "console_scripts": {"adk-task-telemetry": "adk_task_telemetry.cli:main"},
    "opentelemetry_instrumentor": {
        "adk_task_telemetry": "adk_task_telemetry.instrumentation:AdkTaskTelemetryInstrumentor"},
    "pytest11": {"adk_task_telemetry": "adk_task_telemetry.pytest_plugin"},
}


def _run(*cmd: str | Path, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"sdist": ..., "wheel": ...}: ``python -m build`` on a clone of HEAD (the wheel is
    built from the sdist, as pip builds one from PyPI)."""
    missing = [m for m in ("build", "twine", "hatchling")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: install the 'dev' extra")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout with git on PATH: the distributions are built "
                    "from a clone of HEAD")
    tmp = tmp_path_factory.mktemp("packaging")
    clone, out = tmp / "clone", tmp / "dist"
    head = _run("git", "-C", REPO, "rev-parse", "HEAD").stdout.strip()
    _run("git", "clone", "--quiet", REPO, clone)
    _run("git", "-C", clone, "checkout", "--quiet", "--detach", head)
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, clone)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _wheel_metadata(wheel: Path) -> tuple[list[str], Message, configparser.ConfigParser]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = HeaderParser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.optionxform = str  # type: ignore[assignment,method-assign]
        entry_points.read_string(zf.read(f"{info}/entry_points.txt").decode())
    return names, metadata, entry_points


def test_twine_check_passes(dists: dict[str, Path]) -> None:
    proc = _run(sys.executable, "-m", "twine", "check", "--strict", dists["sdist"],
                dists["wheel"])
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_the_wheel_is_typed_licensed_and_declares_its_entry_points(
        dists: dict[str, Path]) -> None:
    names, metadata, entry_points = _wheel_metadata(dists["wheel"])
    info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
    assert f"{DIST}/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    with zipfile.ZipFile(dists["wheel"]) as zf:
        assert zf.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    # Nothing but the package and its metadata: no tests, no src/ prefix.
    assert {n.split("/")[0] for n in names} == {DIST, info}
    # The scenario library demo and audit use ships; the randomized test generator does
    # not (it is test code: tests/lifecycle_generator.py).
    assert f"{DIST}/scenarios/library.py" in names
    assert not [n for n in names if "generat" in n.rsplit("/", 1)[-1]], names
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])
    for group, wanted in ENTRY_POINTS.items():
        assert dict(entry_points[group]) == wanted, group
        for target in wanted.values():  # each one names a module the wheel holds
            module = target.split(":")[0].replace(".", "/")
            assert {f"{module}.py", f"{module}/__init__.py"} & set(names), target


def test_the_python_classifiers_are_the_versions_make_test_runs(
        dists: dict[str, Path]) -> None:
    _, metadata, _ = _wheel_metadata(dists["wheel"])
    declared = {c.rsplit(" :: ", 1)[1] for c in metadata.get_all("Classifier") or []
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    makefile = (REPO / "Makefile").read_text()
    tested = {MAIN_PYTHON}
    for name in ("PYTHONS", "EXIT_PYTHONS"):  # the lifecycle tests; the exit tests
        m = re.search(rf"^{name} \?= (.*)$", makefile, re.MULTILINE)
        assert m is not None, f"{name} ?= ... not found in the Makefile"
        tested.update(m.group(1).split())
    assert declared == tested
    floor = re.fullmatch(r">=(3\.\d+)", metadata["Requires-Python"])
    assert floor is not None and floor.group(1) == min(declared, key=lambda v: int(v[2:]))


def test_the_sdist_holds_the_license_changelog_and_typed_marker(
        dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tf:
        names = tf.getnames()
    (root,) = {n.split("/")[0] for n in names}
    for path in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "PKG-INFO",
                 f"src/{DIST}/py.typed"):
        assert f"{root}/{path}" in names, path


def test_a_users_mypy_sees_the_types(dists: dict[str, Path], tmp_path: Path) -> None:
    """The wheel installed alone in a bare venv: an application's ``mypy --strict``
    types the plugin from it; the same wheel without ``py.typed`` is untyped to mypy
    (the check can tell the two apart)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy not installed: install the 'dev' extra")
    venv = tmp_path / "app-venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
         "--no-index", dists["wheel"])
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(
        "from adk_task_telemetry import TaskTelemetryPlugin\n\n"
        "reveal_type(TaskTelemetryPlugin(max_open_tasks=5).state().open)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
            "--cache-dir", os.devnull, "--python-executable", str(python), "app.py"]

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(mypy, cwd=app, env=env, capture_output=True, text=True,
                              timeout=300, stdin=subprocess.DEVNULL)

    typed = check()
    assert typed.returncode == 0, typed.stdout + typed.stderr
    assert 'Revealed type is "builtins.int"' in typed.stdout or \
        'Revealed type is "int"' in typed.stdout, typed.stdout
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / DIST / "py.typed").unlink()
    untyped = check()
    assert untyped.returncode == 1 and "py.typed" in untyped.stdout, untyped.stdout
