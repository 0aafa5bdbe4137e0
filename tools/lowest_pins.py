"""Prints constraints (pip's format, which uv reads too) pinning every runtime dependency
to the lowest bound pyproject.toml declares (``name>=X`` -> ``name==X``), and google-adk
to the lowest release; `make lowest` installs exactly these and runs the lifecycle tests
on them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# Extras whose lowest bounds are tested with the runtime ones.
EXTRAS = ("prometheus",)


def lowest_pins(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    pins = []
    for req in reqs:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([^,;\s]+)\s*", req)
        if m is None:
            sys.exit(f"lowest_pins: not a plain lower bound: {req!r}")
        pins.append(f"{m.group(1)}=={m.group(2)}")
    # Not ours: google-adk 1.14.0's own lowest google-cloud-aiplatform. Newer ones need a
    # newer google-genai, and without this pip backtracks through hundreds of them (uv
    # does not; the pin stays, since the lowest of what ADK 1.14.0 accepts is the point).
    pins.append("google-cloud-aiplatform==1.95.1")
    return pins


if __name__ == "__main__":
    print("\n".join(lowest_pins()))
