"""The Prometheus rules: what every alert must carry, and the rules as code.

promtool (check rules, the unit tests, the runbook URL's flow through them) runs in
tests/stack/test_rules.py and tests/stack/test_configs.py, with the promtool of the
Prometheus 3 that `make stack-bin` builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .deploy_helpers import (
    ALERTS,
    DEPLOY,
    REPO,
    RULE_TESTS,
    RULES,
    RUNBOOKS,
    check_contract_names,
    load_module,
    load_yaml,
)

#: The rules as code: the one source of the alert definitions.
alerts_src = load_module(DEPLOY / "prometheus" / "alerts.py", "adk_alerts_src")


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in load_yaml(RULES)["groups"] for r in g["rules"]
            if "alert" in r}


def test_every_alert_exists_with_severity_summary_description_and_runbook() -> None:
    alerts = _alerts()
    assert set(alerts) == set(ALERTS)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        ann = rule["annotations"]
        assert ann["summary"].strip() and ann["description"].strip(), name
        url = ann["runbook_url"]
        assert url == f"{alerts_src.base_url()}/{name}.md", url
        if "://" not in url:  # the repository-relative default: the file itself
            assert (REPO / url).is_file(), url
        runbook = RUNBOOKS / f"{name}.md"
        assert runbook.is_file(), f"{runbook} missing"
        text = runbook.read_text()
        assert name in text and "## " in text, f"{runbook} is not a runbook"


def test_every_alert_fires_and_stays_silent_in_the_unit_tests() -> None:
    fires: dict[str, int] = {}
    silent: dict[str, int] = {}
    for case in load_yaml(RULE_TESTS)["tests"]:
        for t in case.get("alert_rule_test", []):
            bucket = fires if t.get("exp_alerts") else silent
            bucket[t["alertname"]] = bucket.get(t["alertname"], 0) + 1
    for name in ALERTS:
        assert fires.get(name), f"no unit test makes {name} fire"
        assert silent.get(name), f"no unit test keeps {name} silent"


def test_first_sample_case_is_covered() -> None:
    """A counter whose first sample is already > 0 must make AdkToolTaskOrphaned fire."""
    covered = False
    for case in load_yaml(RULE_TESTS)["tests"]:
        for s in case["input_series"]:
            if not s["series"].startswith("adk_tool_task_orphaned_total"):
                continue
            first = float(str(s["values"]).split()[0].split("x")[0].split("+")[0])
            if first <= 0:
                continue
            covered |= any(t["alertname"] == "AdkToolTaskOrphaned" and t.get("exp_alerts")
                           and t["eval_time"] in ("0m", "0s", "1m")
                           for t in case["alert_rule_test"])
    assert covered


def test_runbooks_link_back_to_the_rules() -> None:
    for name in ALERTS:
        text = (RUNBOOKS / f"{name}.md").read_text()
        assert "deploy/prometheus/rules/adk-task-telemetry.rules.yml" in text, name
    assert (REPO / "docs" / "deploy.md").is_file()


def test_rules_use_only_contract_metric_and_label_names() -> None:
    for g in load_yaml(RULES)["groups"]:
        for r in g["rules"]:
            assert check_contract_names(r["expr"]) == [], r.get("alert") or r.get("record")
    assert check_contract_names("rate(adk_tool_task_orphan_total[5m])") == [
        "adk_tool_task_orphan_total"]


# --- the rules as code, and their runbook base URL ------------------------------------


def test_the_committed_rules_and_tests_equal_their_generated_form() -> None:
    """deploy/prometheus/alerts.py writes both (`make rules`); nobody edits them by hand."""
    assert alerts_src.main(["--check"]) == 0, "run `make rules`"
    assert alerts_src.ALERT_NAMES == ALERTS
    generated = load_yaml(RULES)
    # Round trip: what the YAML says is exactly what the definitions say.
    source = {s.get("alert") or s["record"]: s for s in (*alerts_src.RECORDING,
                                                         *alerts_src.ALERTS)}
    for rule in generated["groups"][0]["rules"]:
        spec = source[rule.get("alert") or rule["record"]]
        assert rule["expr"] == spec["expr"]
        if "alert" in rule:
            assert rule["annotations"]["description"] == spec["description"]
            assert rule["annotations"]["summary"] == spec["summary"]


def test_no_placeholder_organisation_in_any_runbook_url() -> None:
    k8s = (DEPLOY / "k8s" / "prometheusrule.yaml").read_text()
    for text in (RULES.read_text(), RULE_TESTS.read_text(), k8s):
        assert "github.com/adk-task-telemetry/" not in text


def test_the_default_base_is_this_repository_docs_path(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n')
    assert alerts_src.default_base_url(pyproject) == "docs/runbooks"
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\n'
                         'Repository = "https://git.example.org/team/adk-task-telemetry/"\n')
    assert alerts_src.default_base_url(pyproject) == (
        "https://git.example.org/team/adk-task-telemetry/blob/main/docs/runbooks")
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\n'
                         'Repository = "https://git.example.org/a"\n'
                         'Runbooks = "https://wiki.example.org/runbooks"\n')
    assert alerts_src.default_base_url(pyproject) == "https://wiki.example.org/runbooks"


def test_make_rules_takes_the_base_from_the_makefile_variable() -> None:
    make = (REPO / "Makefile").read_text()
    assert "export RUNBOOK_BASE_URL ?=" in make
    assert '--runbook-base-url "$(RUNBOOK_BASE_URL)"' in make
    assert "dashboards: rules" in make  # `make dashboards` regenerates the rules too


def test_every_alert_says_when_it_fires_for_the_docs() -> None:
    """alerts.FIRES_WHEN (docs/deploy.md's table) has one line per alert, no more."""
    assert set(alerts_src.FIRES_WHEN) == set(alerts_src.ALERT_NAMES)
    assert all(text.strip() for text in alerts_src.FIRES_WHEN.values())
