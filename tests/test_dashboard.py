"""The Grafana dashboard: code and committed JSON agree; panels, variables, queries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from .deploy_helpers import (
    DASHBOARD_CODE,
    DASHBOARD_JSON,
    Prometheus,
    check_contract_names,
    dashboard_panels,
    dashboard_targets,
    label_values_call,
    load_module,
    prometheus_server,
    substitute,
)

PANELS = {
    "Tool tasks per second", "Active tasks", "Orphans in the range", "Error rate",
    "Cancellation rate", "Orphans by tool and agent", "Orphans still alive",
    "Duration percentiles by tool and outcome", "Cancellations by cause", "Worst tools",
    "Tool thread pool threads", "Calls waiting for a pool thread",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text())
    return data


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with prometheus_server(tmp_path_factory.mktemp("prom-parse")) as server:
        yield server


def test_committed_json_is_what_the_code_generates() -> None:
    mod = load_module(DASHBOARD_CODE, "adk_task_telemetry_dashboard")
    assert mod.render() == DASHBOARD_JSON.read_text(), (
        "stale: run python dashboards/adk_task_telemetry.py")


def test_pinned_grafana_flavour() -> None:
    from importlib.metadata import version

    v = version("grafana-foundation-sdk")
    assert v.endswith("!11.6.0"), v
    pyproject = (DASHBOARD_CODE.parent.parent / "pyproject.toml").read_text()
    assert f'"grafana-foundation-sdk=={v}"' in pyproject


def test_panels_have_descriptions_and_use_the_datasource_variable(
        dashboard: dict[str, Any]) -> None:
    panels = [p for p in dashboard_panels(dashboard) if p["type"] != "row"]
    assert {p["title"] for p in panels} >= PANELS
    ids = set()
    for p in panels:
        assert len(p.get("description", "")) > 40, f"{p['title']}: no description"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
        key = (p["gridPos"]["x"], p["gridPos"]["y"])
        assert key not in ids, f"two panels at {key}"
        ids.add(key)


def test_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "app", "agent", "tool"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "app", "agent", "tool"):
        v = variables[name]
        assert v["type"] == "query" and v["includeAll"] and v["allValue"] == ".*"
        label_values_call(v["query"])


def test_queries_filter_on_every_variable_and_not_on_path_specific_labels(
        dashboard: dict[str, Any]) -> None:
    for title, t in dashboard_targets(dashboard):
        expr = t["expr"]
        for m in re.finditer(r"adk_tool_task_\w+\{([^}]*)\}", expr):
            sel = m.group(1)
            for var in ("job", "app", "agent", "tool"):
                assert f'"${var}"' in sel, f"{title}: {m.group(0)} ignores ${var}"
        for label in ("instance", "service_name", "otel_scope_name", "exported_job"):
            assert label not in expr, f"{title}: {label} differs between metric paths"


def test_orphans_panel_has_exemplars(dashboard: dict[str, Any]) -> None:
    panel = next(p for p in dashboard_panels(dashboard)
                 if p["title"] == "Orphans by tool and agent")
    assert panel["targets"][0]["exemplar"] is True


def test_every_query_parses_on_a_real_prometheus(dashboard: dict[str, Any],
                                                  prom: Prometheus) -> None:
    targets = dashboard_targets(dashboard)
    assert len(targets) >= 15
    for title, t in targets:
        res = prom.query(substitute(t["expr"]))
        assert res["status"] == "success", f"{title}: {res.get('error')}\n{t['expr']}"
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            selector, _ = label_values_call(v["query"])
            if selector:
                res = prom.query(substitute(selector))
                assert res["status"] == "success", f"${v['name']}: {res.get('error')}"


def test_the_parse_check_can_fail(prom: Prometheus) -> None:
    res = prom.query('sum by (tool) (rate(adk_tool_task_started_total{job=~".*"}[1m])')
    assert res["status"] == "error" and res["errorType"] == "bad_data"


def test_no_unresolved_variables_after_substitution(dashboard: dict[str, Any]) -> None:
    for _, t in dashboard_targets(dashboard):
        assert "$" not in substitute(t["expr"])


def test_queries_use_only_contract_metric_and_label_names(dashboard: dict[str, Any]) -> None:
    for title, t in dashboard_targets(dashboard):
        assert check_contract_names(t["expr"]) == [], title
    for v in dashboard["templating"]["list"]:
        assert check_contract_names(str(v.get("query", ""))) == [], v["name"]
