"""`make stack-bin` on a new machine: the recipes that fetch a module's source work from an
empty Go module cache.

Alertmanager is built from a copy of its module's source (Makefile, ``AM_WORK``). That
recipe once asked ``go list -m`` for the source directory, which prints nothing for a
module not downloaded yet, so every machine with a cold cache stopped there while ours
passed. This runs the recipe itself, with a fresh, empty ``GOMODCACHE``: it must fetch
the module and lay out the copy. (It downloads one module from the Go module proxy,
about 8 MB.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.stack_programs import REPO


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        msg = "no `go` on PATH: make stack-bin builds the stack's programs with Go 1.26"
        if os.environ.get("ADK_STACK_REQUIRED"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return go


def test_alertmanager_source_recipe_from_an_empty_module_cache(tmp_path: Path) -> None:
    _go()
    cache = tmp_path / "gomodcache"
    cache.mkdir()
    work = f".stack/fresh-cache-check-{os.getpid()}"
    env = {**os.environ, "GOMODCACHE": str(cache),
           "GOFLAGS": (os.environ.get("GOFLAGS", "") + " -modcacherw").strip()}
    try:
        proc = subprocess.run(
            ["make", "--no-print-directory", f"AM_WORK={work}", f"{work}/go.mod"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        copied = REPO / work / "alertmanager"
        assert (copied / "go.mod").read_text().startswith(
            "module github.com/prometheus/alertmanager"), "the module's source was not copied"
        assert (copied / "cmd" / "alertmanager").is_dir()
        assert (copied / "ui" / "app" / "dist" / "README.txt").is_file()
        assert f"=> {REPO / work / 'alertmanager'}" in (REPO / work / "go.mod").read_text()
        assert any(cache.rglob("alertmanager@*")), "nothing was downloaded into the empty cache"
    finally:
        shutil.rmtree(REPO / work, ignore_errors=True)
