"""deploy/'s image tags are the versions `make stack-bin` builds and tests/stack runs, and
the Collector distribution's generated sources are its ocb manifest.

Each version has one owner (tools/stack/versions.py reads them: the ocb manifest for the
Collector, tools/stack/<program>/go.mod for the others); the image tags follow it, so
what the tests prove about a config holds for the image that runs it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .deploy_helpers import DEPLOY, REPO, load_module, load_yaml, load_yaml_all

versions = load_module(REPO / "tools" / "stack" / "versions.py", "adk_stack_versions")
DIST = DEPLOY / "otel-collector" / "distribution"
IMAGES = {  # image repository -> (program of tools/stack/versions.py, tag prefix)
    "otel/opentelemetry-collector-contrib": ("otelcol", ""),
    "jaegertracing/jaeger": ("jaeger", ""),
    "prom/prometheus": ("prometheus", "v"),
    "prom/alertmanager": ("alertmanager", "v"),
    "victoriametrics/victoria-logs": ("victorialogs", "v"),
}


def _deploy_images() -> list[tuple[str, str]]:
    """(file, image) of every image deploy/ runs: compose services and k8s workloads."""
    out = [("compose/docker-compose.yml", str(s["image"]))
           for s in load_yaml(DEPLOY / "compose" / "docker-compose.yml")["services"].values()]
    for path in sorted((DEPLOY / "k8s").rglob("*.yaml")):
        for d in load_yaml_all(path):
            if isinstance(d, dict) and d.get("kind") in ("Deployment", "StatefulSet",
                                                         "DaemonSet"):
                out += [(str(path.relative_to(DEPLOY)), str(c["image"]))
                        for c in d["spec"]["template"]["spec"]["containers"]]
    return out


def test_every_stack_image_is_the_built_version() -> None:
    seen: set[str] = set()
    for where, image in _deploy_images():
        repo, _, tag = image.rpartition(":")
        if repo not in IMAGES:
            continue
        name, prefix = IMAGES[repo]
        assert tag == prefix + versions.release(name), f"{where}: {image}"
        seen.add(repo)
    assert seen == set(IMAGES), f"deploy/ no longer runs {set(IMAGES) - seen}"


def test_the_releases_follow_the_module_versions() -> None:
    """The numbering rules of versions.py, on the pins and on known pairs."""
    assert versions.release("otelcol") == "0.161.0"
    assert versions.module_version("jaeger") == "v1.75.0"
    assert versions.release("jaeger") == "2.12.0"
    assert versions.module_version("prometheus") == "v0.316.0"
    assert versions.release("prometheus") == "3.16.0"
    assert versions.release("alertmanager") == versions.module_version("alertmanager")[1:]
    assert versions.module_version("victorialogs") == "v1.52.2"
    assert versions.release("victorialogs") == "1.52.2"


def _manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = load_yaml(DIST / "builder-config.yaml")
    return manifest


def _manifest_modules(kinds: tuple[str, ...]) -> set[str]:
    return {str(c["gomod"]) for kind in kinds for c in _manifest().get(kind) or []}


COMPONENT_KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")


def test_components_go_lists_exactly_the_manifest_components() -> None:
    """components.go is ocb's output for builder-config.yaml: the same modules, at the
    same versions (regenerate with the command in the manifest's header)."""
    text = (DIST / "components.go").read_text()
    generated = set(re.findall(r'\.NewFactory\(\)\.Type\(\): "([^"]+)"', text))
    assert generated == _manifest_modules(COMPONENT_KINDS)
    main = (DIST / "main.go").read_text()
    providers = set(re.findall(r'\.Scheme\(\): "([^"]+)"', main))
    assert providers == _manifest_modules(("providers",))
    assert f'Version:     "{_manifest()["dist"]["version"]}"' in main
    assert f'Command:     "{_manifest()["dist"]["name"]}"' in main


def test_go_mod_requires_each_manifest_module_at_its_version() -> None:
    gomod = (DIST / "go.mod").read_text()
    for module in _manifest_modules((*COMPONENT_KINDS, "providers")):
        path, version = module.split()
        assert re.search(rf"^\s+{re.escape(path)} {re.escape(version)}$", gomod,
                         re.MULTILINE), module
    for line in _manifest().get("replaces") or []:
        assert f"replace {line}" in gomod, line


@pytest.mark.parametrize("kind", (*COMPONENT_KINDS, "providers"))
def test_every_collector_module_is_of_one_release(kind: str) -> None:
    """Core v0.x and stable v1.x modules of one Collector release, contrib at the same v0.x."""
    release = "v" + _manifest()["dist"]["version"]
    gomod = (DIST / "go.mod").read_text()
    stable = re.search(r"go\.opentelemetry\.io/collector/component (v1\.\d+\.\d+)", gomod)
    assert stable, "go.opentelemetry.io/collector/component not required"
    for module in _manifest_modules((kind,)):
        version = module.split()[1]
        assert version in (release, stable.group(1)), module


def test_the_distribution_sources_are_committed_not_built_here() -> None:
    for name in ("builder-config.yaml", "main.go", "main_others.go", "components.go",
                 "go.mod", "go.sum"):
        assert (DIST / name).is_file(), name
    assert not any(p.is_file() and p.stat().st_mode & 0o111 for p in Path(DIST).iterdir())
