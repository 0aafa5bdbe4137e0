"""No fact of the package is written twice (issue 25): pylint's similarity checker
(``duplicate-code``, R0801) over src/ finds no pair of places that share four or more
lines (its default), comments, docstrings, imports and signatures aside.

pylint comes with the dev extra; `make lint` runs the same check.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "adk_task_telemetry"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pylint") is None,
    reason="pylint is not installed (it comes with the dev extra: pip install -e '.[dev]')")


def similar(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pylint", "--disable=all", "--enable=duplicate-code",
         "--score=n", "--persistent=n", *map(str, paths)],
        capture_output=True, text=True, timeout=600, check=False)


def test_src_has_no_duplicate_code() -> None:
    done = similar(SRC)
    assert done.returncode == 0 and "R0801" not in done.stdout, done.stdout + done.stderr


def test_the_check_sees_a_copied_block(tmp_path: Path) -> None:
    """The checker itself can fail: a function of lifecycle/process_exit.py written again
    in signals/orphan_report.py is a pair."""
    exit_py = SRC / "lifecycle" / "process_exit.py"
    orphans_py = SRC / "signals" / "orphan_report.py"
    shutil.copy(exit_py, tmp_path / "exit.py")
    shutil.copy(orphans_py, tmp_path / "orphans.py")
    source = exit_py.read_text()
    start = source.index("def _foreign_providers(")
    end = source.index("\ndef ", start + 1)
    with (tmp_path / "orphans.py").open("a") as f:
        f.write("\n\n" + source[start:end].replace("_foreign_providers", "_providers_again"))
    assert "R0801" not in similar(tmp_path / "exit.py", orphans_py).stdout
    done = similar(tmp_path / "exit.py", tmp_path / "orphans.py")
    assert "R0801" in done.stdout, done.stdout + done.stderr
    assert "exit" in done.stdout and "orphans" in done.stdout
