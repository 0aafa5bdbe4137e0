"""Every alert rule fires through the real Prometheus 3 and Alertmanager on the scenario
it exists for, and stays silent on runs with nothing wrong; the webhook notification
carries the runbook link.

Two agent processes (tests/stack/metrics_app.py) push their metrics by OTLP, through
configure_telemetry(), into Prometheus 3's OTLP receiver: ``adk-wrong`` runs what each
rule exists for (an orphan that keeps running, a call cut by its caller, a call that
never returns inside its run, a tool that fails on every call), ``adk-clean`` runs
scenarios with nothing wrong, in a loop. Prometheus runs deploy/prometheus/prometheus.yml
and the rules of deploy/prometheus/rules/, Alertmanager deploy/alertmanager/alertmanager.yml
with its webhooks pointed at a receiver of the test's own on loopback.

Time is scaled, every ratio kept. The rules wait 10 and 15 minutes (``for:``) over
windows of 5, 10, 15 minutes and a day; as committed, AdkToolTaskStuck needs a call
running for over 10 minutes before it fires (its oldest-age gauge past the 5-minute
floor, for 5 minutes). So the test runs in a world where time goes
``ALERT_TIME_SCALE`` (15) times faster, on Prometheus' side only: every duration in the
rules (range selectors, offsets, ``for:``) and the three numbers of the rules that are
seconds (the 300 s of the 5-minute window in AdkToolTaskErrorRateHigh and of the 5-minute
floor of AdkToolTaskStuck) are divided by it, and so are the evaluation and scrape
interval (15 s -> 1 s), the query lookback (5 m -> 20 s) and the agents' metric export
interval (60 s -> 4 s). Counts, ratios and thresholds stay as committed; Alertmanager's
config stays as committed (group_wait 30 s / 10 s, real time). ``ADK_ALERT_TIME_SCALE=1``
runs the rules exactly as committed, in real time (about 17 minutes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from ..deploy_helpers import DEPLOY, load_module
from ..stack_programs import check, free_port, running, wait_until
from .metrics_helpers import (
    PROMETHEUS_YML,
    RULES_DIR,
    Api,
    Webhook,
    alertmanager,
    metrics_app,
    otlp_env,
    prometheus,
)

ALERT_TIME_SCALE = int(os.environ.get("ADK_ALERT_TIME_SCALE", "15"))
WRONG, CLEAN = "adk-wrong", "adk-clean"
# The numbers in the committed rules that are seconds (not counts or ratios), and how
# many times each occurs: a new one must be added here, or the scaled rules would lie.
SECONDS_LITERALS = {"300": 3}
_DURATION = r"\d+(?:ms|s|m|h|d|w|y)"

# alertname -> (agent, tool) of the scenario it exists for, and the receiver's path.
EXPECTED = {
    "AdkToolTaskOrphaned": ({("ticker", "stubborn_feed"), ("analyst", "crunch_numbers")},
                            "/alerts/tickets"),
    "AdkToolTaskOrphansAlive": ({("ticker", "stubborn_feed")}, "/alerts/oncall"),
    "AdkToolCallUnanswered": ({("analyst", "crunch_numbers"), ("clerk", "flaky_api"),
                               ("clerk", "slow_search")}, "/alerts/tickets"),
    "AdkToolTaskErrorRateHigh": ({("clerk", "flaky_api")}, "/alerts/tickets"),
    "AdkToolTaskStuck": ({("approver", "await_approval")}, "/alerts/tickets"),
}


def _seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    n, unit = re.fullmatch(r"(\d+)(ms|s|m|h|d|w|y)", text).groups()  # type: ignore[union-attr]
    return int(n) * units[unit]


def scaled(duration: str, k: int) -> str:
    """``duration`` / k in whole seconds ("15m", 15 -> "60s"); exact or it fails."""
    s = _seconds(duration)
    assert s % k == 0, f"{duration} is not a whole number of seconds / {k}"
    return f"{int(s // k)}s" if k != 1 else duration


def scale_rules(text: str, k: int) -> str:
    """The rules file with time running ``k`` times faster (k=1: as committed)."""
    if k == 1:
        return text
    for literal, count in SECONDS_LITERALS.items():
        found = len(re.findall(rf"(?<![\w.\[]){literal}(?![\w.\]])", text))
        assert found == count, f"{literal} occurs {found} times in the rules, not {count}"
        text = re.sub(rf"(?<![\w.\[]){literal}(?![\w.\]])", str(int(literal) // k), text)
    text = re.sub(rf"\[({_DURATION})\]", lambda m: f"[{scaled(m.group(1), k)}]", text)
    text = re.sub(rf"\boffset ({_DURATION})\b", lambda m: f"offset {scaled(m.group(1), k)}",
                  text)
    return re.sub(rf"^(\s+for: )({_DURATION})$", lambda m: m.group(1) + scaled(m.group(2), k),
                  text, flags=re.MULTILINE)


@dataclass
class World:
    prom: Api
    webhook: Webhook
    rules: dict[str, Any]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("alerts-live")
    k = ALERT_TIME_SCALE
    rules_dir = workdir / "rules"
    rules_dir.mkdir()
    rules: dict[str, Any] = {}
    for path in sorted(RULES_DIR.glob("*.yml")):
        text = scale_rules(path.read_text(), k)
        (rules_dir / path.name).write_text(text)
        for group in yaml.safe_load(text)["groups"]:
            rules.update({r["alert"]: r for r in group["rules"] if "alert" in r})
    ok = check("promtool", ["check", "rules", *map(str, sorted(rules_dir.glob("*.yml")))])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    for key in ("scrape_interval", "evaluation_interval"):
        config["global"][key] = scaled(config["global"][key], k)
    with Webhook() as hook:
        am_prog, am = alertmanager(workdir, {"host.docker.internal:5001": f"127.0.0.1:{hook.port}"})
        prom_prog, prom = prometheus(workdir, {
            "alertmanager:9093": am.url.removeprefix("http://"),
            "otel-collector:8888": f"127.0.0.1:{free_port()}",
            "jaeger:8888": f"127.0.0.1:{free_port()}",
            "host.docker.internal:9464": f"127.0.0.1:{free_port()}",
        }, config=config, rules_dir=rules_dir)
        prom_prog.args.append(f"--query.lookback-delta={scaled('5m', k)}")
        env = {"OTEL_METRIC_EXPORT_INTERVAL": str(60_000 // k)}
        with running(am_prog, prom_prog), \
                metrics_app(workdir, "otlp", WRONG, "--workload", "wrong",
                            env={**otlp_env(prom.url), **env}), \
                metrics_app(workdir, "otlp", CLEAN, "--workload", "clean",
                            env={**otlp_env(prom.url), **env}):
            world = World(prom, hook, rules)

            def all_delivered() -> bool:
                return not missing(world)
            longest = max(_seconds(r.get("for", "0s")) for r in rules.values())
            # for: + the longest window + Alertmanager's group_wait, with room to spare
            delivered = wait_until(all_delivered, timeout=longest * 3 + 300, interval=1)
            assert delivered, (f"alerts not delivered: {missing(world)}\n"
                               f"{prom_prog.log()}\n{am_prog.log()}")
            yield world


def delivered(world: World) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path, alert in world.webhook.alerts():
        if alert["status"] == "firing":
            out.setdefault(alert["labels"]["alertname"], []).append((path, alert))
    return out


def missing(world: World) -> dict[str, set[tuple[str, str]]]:
    """alertname -> (agent, tool) pairs not delivered yet for the wrong job."""
    got = delivered(world)
    out = {}
    for name, (pairs, _) in EXPECTED.items():
        seen = {(a["labels"]["gen_ai_agent_name"], a["labels"]["gen_ai_tool_name"])
                for _, a in got.get(name, []) if a["labels"].get("job") == WRONG}
        if pairs - seen:
            out[name] = pairs - seen
    return out


def test_every_rule_is_expected() -> None:
    """EXPECTED names every alert of the rules but the loss alerts (the pipeline's, not
    an agent scenario's: their faults are in test_loss_alerts_live.py): a new rule
    needs its scenario here."""
    names = {r["alert"] for p in RULES_DIR.glob("*.yml")
             for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"] if "alert" in r}
    loss = {a["alert"] for a in load_module(DEPLOY / "prometheus" / "alerts.py",
                                            "adk_alerts_src_live").LOSS_ALERTS}
    assert names == set(EXPECTED) | loss


def test_scaling_keeps_the_committed_rules_at_one() -> None:
    for path in RULES_DIR.glob("*.yml"):
        assert scale_rules(path.read_text(), 1) == path.read_text()
        fast = scale_rules(path.read_text(), 15)
        assert "for: 60s" in fast and "[20s]" in fast and "offset 40s" in fast
        assert "[5760s]" in fast and "* 20 >= 10" in fast and "> 0.1" in fast


def test_every_alert_fires_with_its_runbook_on_its_scenario(world: World) -> None:
    got = delivered(world)
    print(f"\nalerts (time x{ALERT_TIME_SCALE}): fired/expected, webhook deliveries")
    for name, (pairs, path) in EXPECTED.items():
        mine = [(p, a) for p, a in got.get(name, []) if a["labels"].get("job") == WRONG]
        fired = {(a["labels"]["gen_ai_agent_name"], a["labels"]["gen_ai_tool_name"])
                 for _, a in mine}
        print(f"  {name}: {len(fired & pairs)}/{len(pairs)} "
              f"({', '.join(sorted(t for _, t in fired))}) -> "
              f"{sorted({p for p, _ in mine})}, {len(mine)} alert(s) delivered")
        assert mine, name
        for p, alert in mine:
            assert p == path, (name, p)
            runbook = alert["annotations"]["runbook_url"]
            assert runbook == world.rules[name]["annotations"]["runbook_url"]
            assert runbook.endswith(f"/{name}.md"), runbook
            assert alert["labels"]["severity"] == world.rules[name]["labels"]["severity"]
    assert not missing(world)


def test_nothing_fires_on_runs_with_nothing_wrong(world: World) -> None:
    # The clean agent's series went through every rule for as long as the wrong one's
    # took to fire (positive evidence that the rules saw it):
    ended = world.prom.scalar(f'sum(adk:tool_task_ended:rate5m{{job="{CLEAN}"}})')
    assert ended and ended > 0, "the clean job's tasks never reached the recording rules"
    alerts = world.prom.query(f'ALERTS{{job="{CLEAN}"}}[1h]')["data"]["result"]
    assert alerts == [], [a["metric"] for a in alerts]
    clean = [a for _, a in world.webhook.alerts() if a["labels"].get("job") == CLEAN]
    assert clean == []
    print(f"\nclean job: 0 alerts pending or firing, 0 notifications "
          f"(its tasks ended at {ended:.2f}/s through the rules)")
