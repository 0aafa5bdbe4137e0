"""The versions of the stack's programs, read from the files that pin them.

Each version has one owner: the Collector's in its ocb manifest
(deploy/otel-collector/distribution/builder-config.yaml, ``dist.version``), the others in
the go.mod of tools/stack/<program>/ (the Go module version). The release a user knows
(the image tag) follows from the module version by the projects' own numbering:
Prometheus 3.X.Y is module v0.3XX.Y, Jaeger v2 2.N.P ships in module v1.(N+63).P
(v1.74.0 / v2.11.0, v1.75.0 / v2.12.0 in Jaeger's CHANGELOG and RELEASE.md), Alertmanager's
and VictoriaLogs' module versions are their releases.

`make stack-bin` stamps these into the binaries (``--version``), and
tests/test_stack_versions.py holds deploy/'s image tags to them.

    python3 tools/stack/versions.py            # NAME=VERSION lines
    python3 tools/stack/versions.py jaeger     # one release, e.g. 2.12.0
    python3 tools/stack/versions.py --module jaeger   # its Go module version, v1.75.0
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "otel-collector" / "distribution" / "builder-config.yaml"
GO_MODS = {
    "jaeger": (REPO / "tools" / "stack" / "jaeger" / "go.mod", "github.com/jaegertracing/jaeger"),
    "prometheus": (REPO / "tools" / "stack" / "prometheus" / "go.mod",
                   "github.com/prometheus/prometheus"),
    "alertmanager": (REPO / "tools" / "stack" / "alertmanager" / "go.mod",
                     "github.com/prometheus/alertmanager"),
    "victorialogs": (REPO / "tools" / "stack" / "victorialogs" / "go.mod",
                     "github.com/VictoriaMetrics/VictoriaLogs"),
}
# Jaeger v2's minor is its v1 module's minor less this (v1.74.0 is v2.11.0).
JAEGER_V2_MINOR_OFFSET = 63


def module_version(program: str) -> str:
    """The required version of the program's Go module, as in its go.mod (``v1.75.0``)."""
    path, module = GO_MODS[program]
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)(?:\s*//.*)?$",
                      path.read_text(), re.MULTILINE)
    if not found:
        raise LookupError(f"{module} not required in {path}")
    return found.group(1)


def collector_version() -> str:
    """``dist.version`` of the ocb manifest (the Collector release, ``0.161.0``)."""
    found = re.search(r"^dist:\n(?:[ \t]+.*\n)*?[ \t]+version:\s*(\S+)",
                      MANIFEST.read_text(), re.MULTILINE)
    if not found:
        raise LookupError(f"dist.version not in {MANIFEST}")
    return found.group(1).strip("\"'")


def release(program: str) -> str:
    """The release (image tag without a ``v``) of one program: ``prometheus`` -> ``3.16.0``."""
    if program == "otelcol":
        return collector_version()
    major, minor, patch = (int(p) for p in module_version(program).lstrip("v").split("."))
    if program == "prometheus":
        if major != 0 or minor < 300:
            raise ValueError(f"Prometheus module v{major}.{minor}.{patch} is not a 3.x release")
        return f"{minor // 100}.{minor % 100}.{patch}"
    if program == "jaeger":
        if major != 1:
            raise ValueError(f"Jaeger module v{major}.{minor}.{patch} is not a v1/v2 pair")
        return f"2.{minor - JAEGER_V2_MINOR_OFFSET}.{patch}"
    return f"{major}.{minor}.{patch}"


PROGRAMS = ("otelcol", "jaeger", "prometheus", "alertmanager", "victorialogs")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--module"] and len(argv) == 2:
        print(module_version(argv[1]))
    elif argv:
        print(release(argv[0]))
    else:
        for name in PROGRAMS:
            print(f"{name}={release(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
