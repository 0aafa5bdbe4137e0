"""docs/deploy.md is held to the code it describes, as docs/telemetry.md is to semconv.

Its alert table, panel list, image table and program versions are marked blocks that
tools/deploy_doc.py writes from the rules, the dashboard code, the compose file and
tools/stack/versions.py (`make docs`); a stale block fails here. The checks below read
the page as a user does (the table of section 3, the panel names of section 5, the
versions of sections 1 and 7), so they fail on a page that drifted with or without
markers: the page before these blocks listed 4 of 5 alerts and an old panel list.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy_helpers import ALERTS, DEPLOY, REPO, load_module

deploy_doc = load_module(REPO / "tools" / "deploy_doc.py", "adk_deploy_doc_tool")
versions = load_module(REPO / "tools" / "stack" / "versions.py", "adk_stack_versions_doc")

DOC = REPO / "docs" / "deploy.md"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yml"


def section(text: str, number: int) -> str:
    """The text of ``## <number>.`` up to the next ``## `` heading."""
    found = re.search(rf"^## {number}\. .*?(?=^## |\Z)", text, re.M | re.S)
    assert found, f"no section {number}"
    return found.group(0)


def documented_alerts(text: str) -> list[str]:
    """The alert names in the first column of section 3's table."""
    return re.findall(r"^\| (\w+) \| (?:critical|warning) \|", section(text, 3), re.M)


def undocumented_panels(text: str) -> list[str]:
    """Rows and panels of the dashboard that section 5 does not name (in any case)."""
    part = section(text, 5).lower()
    return [title for row, panels in deploy_doc.dashboard_panels()
            for title in (row, *panels) if title.lower() not in part]


def version_drift(text: str) -> list[str]:
    """Versions of the stack that the page or the Grafana datasource state otherwise
    than tools/stack/versions.py (the manifest and the go.mod files)."""
    wrong = []
    images = {"otelcol": f"otel/opentelemetry-collector-contrib:{versions.release('otelcol')}",
              "jaeger": f"jaegertracing/jaeger:{versions.release('jaeger')}",
              "prometheus": f"prom/prometheus:v{versions.release('prometheus')}",
              "alertmanager": f"prom/alertmanager:v{versions.release('alertmanager')}"}
    for image in images.values():
        for number in (1, 7):
            if f"`{image}`" not in section(text, number):
                wrong.append(f"section {number} does not name {image}")
    for program in ("jaeger", "prometheus", "alertmanager"):
        if versions.module_version(program) not in section(text, 7):
            wrong.append(f"section 7 lacks {program}'s module {versions.module_version(program)}")
    stated = {str(ds.get("jsonData", {}).get("prometheusVersion"))
              for ds in yaml.safe_load(DATASOURCES.read_text())["datasources"]
              if ds["type"] == "prometheus"}
    if stated != {versions.release("prometheus")}:
        wrong.append(f"the Grafana datasource says Prometheus {stated}")
    return wrong


def test_the_generated_blocks_are_current() -> None:
    assert deploy_doc.stale(DOC) == [], "run `make docs` (python tools/deploy_doc.py)"


def test_a_stale_block_is_reported(tmp_path: Path) -> None:
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| AdkToolTaskStuck |"))
    doc = tmp_path / "deploy.md"
    doc.write_text(text.replace(row + "\n", ""))
    assert deploy_doc.stale(doc) == ["alerts"]
    doc.write_text(text.replace("<!-- deploy-doc:begin panels", "<!-- panels"))
    assert deploy_doc.stale(doc)[:1] == ["panels (no block)"]


def test_the_alert_table_lists_every_alert() -> None:
    alerts_src = load_module(DEPLOY / "prometheus" / "alerts.py", "adk_alerts_src_doc")
    assert documented_alerts(DOC.read_text()) == list(alerts_src.ALERT_NAMES)
    assert set(alerts_src.ALERT_NAMES) == set(ALERTS)


def test_the_panel_list_names_every_row_and_panel() -> None:
    assert undocumented_panels(DOC.read_text()) == []


def test_the_stated_versions_are_the_built_ones() -> None:
    assert version_drift(DOC.read_text()) == []


def test_the_cancel_cause_is_described_as_label_and_event_attribute() -> None:
    part = section(DOC.read_text(), 5)
    assert "adk_tool_task_cancel_cause" in part and "adk.tool_task.cancel.cause" in part
    assert "not a metric label" not in part


def test_the_files_the_deploy_configs_name_exist() -> None:
    """Comments in deploy/ that name a test file name one that exists."""
    missing = []
    for path in DEPLOY.rglob("*.y*ml"):
        for name in re.findall(r"\btests/[\w/]+\.py\b", path.read_text()):
            if not (REPO / name).is_file():
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert missing == []


def test_the_pages_commands_name_no_macos_opener_nor_a_bare_pip_install() -> None:
    """Section 1 and 6 run as written on Debian: no `open URL`, the CLI by its
    virtualenv path, python from a virtualenv with the dev extra."""
    text = DOC.read_text()
    for number in (1, 6):
        blocks = re.findall(r"```sh\n(.*?)```", section(text, number), re.S)
        assert blocks, number
        for line in "".join(blocks).splitlines():
            cmd = line.split("#")[0].strip()
            assert not cmd.startswith(("open ", "python ", "adk-task-telemetry ",
                                       "pip install")), line
    assert "pip install adk-task-telemetry" not in text
