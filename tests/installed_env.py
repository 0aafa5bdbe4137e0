"""A virtualenv where this package is really installed: a wheel in site-packages.

What a user gets from ``pip install adk-task-telemetry`` differs from the editable
source tree the suite runs from: files live in the virtualenv's
``lib/python3.X/site-packages``, and without the ``[instrument]`` extra there is no
``opentelemetry-instrumentation``. :func:`make_env` builds such a virtualenv in
seconds, offline, from the running interpreter:

1. ``python -m venv --without-pip``;
2. its site-packages gets the distributions installed beside the running one
   (symlinked, so ADK, the SDK and pytest are the versions under test), minus
   this package's own (editable) install and any distribution ``leave_out`` names
   (with every file of theirs: a plain install has no trace of them);
3. ``pip install --no-deps --no-index`` installs wheels built here: this package
   from the code under test, and any tool package a test brings.

Subprocesses of it run without PYTHONPATH, so they import the installed copy.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import adk_task_telemetry

DIST = "adk-task-telemetry"
#: What the ``[instrument]`` extra brings that a plain install does not have.
INSTRUMENT_EXTRA = ("opentelemetry-instrumentation", "opentelemetry-distro", "wrapt")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Env:
    root: Path
    python: Path
    site: Path  # its site-packages, where the wheels went

    def run(self, *args: str, cwd: Path, program: str = "python", timeout: float = 240
            ) -> subprocess.CompletedProcess[str]:
        """``program args...`` from this virtualenv's bin/ (python, or a console script
        pip made), without PYTHONPATH: the installed copy is what runs."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        return subprocess.run([str(self.root / "bin" / program), *args], cwd=cwd, env=env,
                              text=True, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def build_wheel(out: Path, name: str, package_dir: Path, version: str = "0.0.0",
                entry_points: str = "") -> Path:
    """A pure-Python wheel of one package directory (the layout ``pip`` installs)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = out / f"{dist}-{version}-py3-none-any.whl"
    files: list[tuple[str, bytes]] = []
    for f in sorted(package_dir.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            files.append((f"{package_dir.name}/{f.relative_to(package_dir).as_posix()}",
                          f.read_bytes()))
    files.append((f"{info}/METADATA",
                  f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()))
    files.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tests\n"
                                   b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    if entry_points:
        files.append((f"{info}/entry_points.txt", entry_points.encode()))
    record = []
    for arc, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{arc},sha256={digest.decode()},{len(data)}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def package_wheel(out: Path) -> Path:
    """This package, from the code under test, with its entry points (console script,
    pytest11, opentelemetry_instrumentor) as the installed distribution declares them."""
    entry_points = metadata.distribution(DIST).read_text("entry_points.txt") or ""
    return build_wheel(out, DIST, Path(adk_task_telemetry.__file__).parent,
                       adk_task_telemetry.__version__, entry_points)


def _owned_files(site: Path, names: Iterable[str]) -> set[Path]:
    """Every file (relative to ``site``) of the named distributions installed there."""
    wanted = {_canonical(n) for n in names}
    out: set[Path] = set()
    for dist in metadata.distributions(path=[str(site)]):
        if _canonical(dist.metadata["Name"] or "") not in wanted:
            continue
        for f in dist.files or ():
            located = Path(os.path.normpath(site / f))
            if located.is_relative_to(site):
                out.add(located.relative_to(site))
    return out


def _mirror(src: Path, dst: Path, rel: Path, left_out: set[Path], partial: set[Path]) -> None:
    """Symlinks ``src``'s entries into ``dst``; a directory holding left-out files is
    made real and mirrored entry by entry (a namespace package such as opentelemetry/)."""
    dst.mkdir(exist_ok=True)
    for entry in sorted(src.iterdir()):
        r = rel / entry.name
        if r in left_out or (entry.name == "__pycache__" and r.parent in partial):
            continue
        if r in partial and entry.is_dir():
            _mirror(entry, dst / entry.name, r, left_out, partial)
            if not any((dst / entry.name).iterdir()):
                (dst / entry.name).rmdir()  # every file of it was left out
        else:
            (dst / entry.name).symlink_to(entry)


def make_env(root: Path, *, leave_out: Sequence[str] = (), wheels: Sequence[Path] = ()
             ) -> Env:
    """A virtualenv at ``root`` (see the module docstring); ``wheels`` besides this
    package's own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   capture_output=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    left_out = _owned_files(here, [DIST, *leave_out])
    partial = {p for f in left_out for p in f.parents if p != Path(".")}
    _mirror(here, site, Path("."), left_out, partial)
    built = [package_wheel(root), *wheels]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
                    *map(str, built)], check=True, capture_output=True, text=True)
    return Env(root, python, site)
