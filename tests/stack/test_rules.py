"""The rule unit tests bite, under the promtool of Prometheus 3 (`make stack-bin`).

tests/stack/test_configs.py runs `promtool check rules` and `promtool test rules` on the
committed files; here the unit tests are shown to fail on a broken rule and on a runbook
URL that differs, and a runbook base URL is followed through rules, tests and the
PrometheusRule. Fields of promtool 3's test format (fuzzy_compare, start_timestamp) may
be used: this promtool reads them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.deploy_helpers import ALERTS, DEPLOY, RULE_TESTS, RULES, load_module, load_yaml
from tests.stack_programs import check

alerts_src = load_module(DEPLOY / "prometheus" / "alerts.py", "adk_alerts_src_stack")


def test_the_unit_tests_catch_an_orphan_rule_without_its_first_sample_branch(
        tmp_path: Path) -> None:
    """Drop the `unless ... offset` branch of AdkToolTaskOrphaned and the tests fail."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    rules = load_yaml(RULES)
    for g in rules["groups"]:
        for r in g["rules"]:
            if r.get("alert") == "AdkToolTaskOrphaned":
                r["expr"] = ("sum by (job, adk_app_name, gen_ai_agent_name, gen_ai_tool_name) "
                             "(increase(adk_tool_task_orphaned_total[10m]) > 0)")
    (tmp_path / "rules" / RULES.name).write_text(yaml.safe_dump(rules))
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    res = check("promtool", ["test", "rules", str(tmp_path / "tests" / RULE_TESTS.name)])
    assert res.returncode != 0
    assert "first sample ever seen is already above zero" in res.stdout + res.stderr


def test_promtool_3_reads_fuzzy_compare(tmp_path: Path) -> None:
    """The unit tests may use promtool 3's fields: fuzzy_compare on the committed tests."""
    tests = load_yaml(RULE_TESTS)
    tests["fuzzy_compare"] = True
    tests["rule_files"] = [str(RULES)]
    path = tmp_path / "t.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    res = check("promtool", ["test", "rules", str(path)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def _render_into(tmp: Path, rules_base: str, tests_base: str) -> Path:
    (tmp / "rules").mkdir()
    (tmp / "tests").mkdir()
    (tmp / "rules" / RULES.name).write_text(alerts_src.render_rules(rules_base))
    tests = tmp / "tests" / RULE_TESTS.name
    tests.write_text(alerts_src.render_tests(tests_base, RULE_TESTS.read_text()))
    return tests


def test_a_runbook_base_url_flows_into_rules_tests_and_prometheusrule(tmp_path: Path) -> None:
    base = "https://runbooks.example.org/adk"
    tests = _render_into(tmp_path, base, base)
    res = check("promtool", ["test", "rules", str(tests)])
    assert res.returncode == 0, res.stdout + res.stderr
    urls = {r["annotations"]["runbook_url"]
            for r in load_yaml(tmp_path / "rules" / RULES.name)["groups"][0]["rules"]
            if "alert" in r}
    assert urls == {f"{base}/{name}.md" for name in ALERTS}
    k8s: Any = load_module(DEPLOY / "k8s" / "render_prometheusrule.py",
                           "render_prometheusrule_s")
    k8s.RULES = tmp_path / "rules" / RULES.name
    assert f"runbook_url: {base}/AdkToolTaskStuck.md" in k8s.render()


def test_the_unit_tests_check_the_runbook_url(tmp_path: Path) -> None:
    """Rules written for one base, tests expecting another: promtool must fail."""
    tests = _render_into(tmp_path, "https://a.example.org/rb", "https://b.example.org/rb")
    res = check("promtool", ["test", "rules", str(tests)])
    assert res.returncode != 0
    assert "runbook_url" in res.stdout + res.stderr
