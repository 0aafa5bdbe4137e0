"""Real pip resolution: this package installs beside an app's google-adk and leaves it alone.

Usage: python tools/install_check.py [PYTHON_OF_AN_APP_VENV ...]

1. ``pip install --dry-run --ignore-installed --report - . google-adk==X`` for apps that
   pin X (2.9.0 and 1.39.0, the versions of issue 11): both in one command resolve, and
   the resolution keeps google-adk at X.
2. For each given venv (an app with some google-adk already installed): a plain
   ``pip install --dry-run --report - .`` installs no google-adk at all.
Exit status 1 if any check fails; each check prints one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_PINS = ("2.9.0", "1.39.0")


def resolve(python: str, *reqs: str, ignore_installed: bool) -> dict[str, str]:
    """What pip would install: {distribution name: version}."""
    cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
           "--disable-pip-version-check"]
    if ignore_installed:
        cmd.append("--ignore-installed")
    proc = subprocess.run([*cmd, *reqs], capture_output=True, text=True, cwd=ROOT)
    if "No module named pip" in proc.stderr:
        raise RuntimeError(f"{python} has no pip: this check runs pip's own resolver, as a "
                           "user would (make builds the full venvs with pip: uv venv --seed)")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"pip could not resolve {' '.join(reqs)}:\n{tail}")
    report = json.loads(proc.stdout)
    return {item["metadata"]["name"].lower(): item["metadata"]["version"]
            for item in report["install"]}


def installed_adk(python: str) -> str:
    return subprocess.run(
        [python, "-c", "from importlib.metadata import version; print(version('google-adk'))"],
        capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str]) -> int:
    failed = 0
    for pin in APP_PINS:
        try:
            got = resolve(sys.executable, str(ROOT), f"google-adk=={pin}",
                          ignore_installed=True)
            ok = got.get("google-adk") == pin and "adk-task-telemetry" in got
            detail = f"resolves with google-adk {got.get('google-adk')}"
        except RuntimeError as e:
            ok, detail = False, str(e)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} pip install adk-task-telemetry google-adk=={pin}: "
              f"{detail}")
    for python in argv:
        before = installed_adk(python)
        try:
            got = resolve(python, str(ROOT), ignore_installed=False)
            ok = "google-adk" not in got
            detail = ("leaves it alone" if ok
                      else f"would move it to {got['google-adk']}")
        except RuntimeError as e:
            ok, detail = False, str(e)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} pip install adk-task-telemetry into an app on "
              f"google-adk {before}: {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
