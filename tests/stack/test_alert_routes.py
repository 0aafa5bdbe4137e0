"""Every alert of ours reaches the receiver its severity names, through the committed
Alertmanager routes (`amtool config routes test`, the amtool `make stack-bin` builds).

deploy/alertmanager/alertmanager.yml documents, in its header, one receiver per severity
(``severity critical -> receiver adk-oncall``). A route that matches alert names (the
warning route once matched only ``AdkToolTask.*``) or a new alert with a severity nobody
routes would send a page to the ticket queue, or the reverse: each rule of
deploy/prometheus/rules/ is routed here with its own labels.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy_helpers import ALERTS, DEPLOY, RULES, load_yaml
from tests.stack_programs import check

ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"
DOCUMENTED = re.compile(r"^#\s+severity (\w+) -> receiver ([\w-]+)\s*$", re.M)


def documented_receivers(config: Path = ALERTMANAGER_YML) -> dict[str, str]:
    """severity -> receiver, from the config's header comment."""
    return dict(DOCUMENTED.findall(config.read_text()))


def alert_labels() -> dict[str, dict[str, str]]:
    """Each alert's labels as Alertmanager sees them (its own labels, its name, and a
    value for every label the routes group by)."""
    out = {}
    for group in load_yaml(RULES)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                out[rule["alert"]] = {"alertname": rule["alert"], "job": "agents",
                                      "adk_app_name": "support", **rule["labels"]}
    return out


def misrouted(config: Path) -> list[str]:
    """The alerts that do not reach exactly their severity's documented receiver."""
    receivers = documented_receivers()
    wrong = []
    for name, labels in alert_labels().items():
        want = receivers.get(labels["severity"])
        res = check("amtool", ["config", "routes", "test", f"--config.file={config}",
                               *(f"{k}={v}" for k, v in labels.items())])
        got = res.stdout.strip()
        if res.returncode != 0 or want is None or got != want:
            wrong.append(f"{name} (severity {labels['severity']}): routed to {got!r}, "
                         f"documented {want!r} {res.stderr.strip()}")
    return wrong


def test_the_config_documents_a_receiver_per_severity_our_rules_use() -> None:
    receivers = documented_receivers()
    assert receivers == {"critical": "adk-oncall", "warning": "adk-tickets"}
    names = {r["name"] for r in load_yaml(ALERTMANAGER_YML)["receivers"]}
    assert set(receivers.values()) <= names
    assert {lbl["severity"] for lbl in alert_labels().values()} <= set(receivers)


def test_every_rule_of_ours_routes_to_its_severitys_receiver() -> None:
    assert set(alert_labels()) == set(ALERTS)
    assert misrouted(ALERTMANAGER_YML) == []


def test_a_route_that_sends_a_page_to_the_ticket_queue_is_caught(tmp_path: Path) -> None:
    """Without the critical route AdkToolTaskOrphansAlive reaches the default
    (tickets); a warning route that matches alert names (as it once did:
    ``AdkToolTask.*``) under an on-call default leaves the other warnings paging: both
    are reported."""
    cfg = load_yaml(ALERTMANAGER_YML)
    cfg["route"]["routes"] = [r for r in cfg["route"]["routes"]
                              if r["receiver"] != "adk-oncall"]
    no_page = tmp_path / "no-page.yml"
    no_page.write_text(yaml.safe_dump(cfg))
    assert [m.split(" ")[0] for m in misrouted(no_page)] == ["AdkToolTaskOrphansAlive"]

    cfg = load_yaml(ALERTMANAGER_YML)
    cfg["route"]["receiver"] = "adk-oncall"
    for route in cfg["route"]["routes"]:
        if route["receiver"] == "adk-tickets":
            route["matchers"] = ['alertname=~"AdkToolTask.*"', *route["matchers"]]
    by_name = tmp_path / "by-name.yml"
    by_name.write_text(yaml.safe_dump(cfg))
    wrong = {m.split(" ")[0] for m in misrouted(by_name)}
    assert {"OtelCollectorExportFailing", "AdkTelemetryExportDropped",
            "AdkToolCallUnanswered"} <= wrong
    assert not any(n.startswith("AdkToolTask") for n in wrong)
