"""VictoriaLogs, deploy/'s logs store, as the stack tests run it and query it: the flags
deploy/ gives it (compose's service, the k8s StatefulSet's container) with a local
listener and storage, the addresses deploy/ gives it, and its own LogsQL API (what its
Grafana datasource calls)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.stack_programs import REPO, Program

COMPOSE = REPO / "deploy" / "compose" / "docker-compose.yml"
K8S = REPO / "deploy" / "k8s" / "victorialogs.yaml"
#: VictoriaLogs' address in deploy/: the compose service, the k8s Service.
ADDRESSES = ("http://victorialogs:9428",
             "http://victorialogs.adk-observability.svc.cluster.local:9428")


def addresses(port: int) -> dict[str, str]:
    """deploy/'s addresses of VictoriaLogs -> the local one (for ``rewrite``)."""
    return dict.fromkeys(ADDRESSES, f"http://127.0.0.1:{port}")


def compose_flags() -> list[str]:
    return list(yaml.safe_load(COMPOSE.read_text())["services"]["victorialogs"]["command"])


def k8s_flags() -> list[str]:
    (sts,) = [d for d in yaml.safe_load_all(K8S.read_text())
              if d and d["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def program(port: int, workdir: Path, label: str = "victorialogs",
            command: list[str] | None = None) -> Program:
    """VictoriaLogs with deploy/'s flags (``command``; compose's by default), its
    listener and storage local."""
    command = compose_flags() if command is None else command
    args = [a for a in command if not a.startswith(("-httpListenAddr=", "-storageDataPath="))]
    assert len(args) == len(command) - 2, command
    args += [f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={workdir / label}-data"]
    return Program("victoria-logs", args, workdir,
                   ready_url=f"http://127.0.0.1:{port}/health", label=label)


class VictoriaLogs:
    """VictoriaLogs' own query API (LogsQL over HTTP)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, logsql: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The records matching ``logsql`` (all time), as field -> value."""
        body = urllib.parse.urlencode({"query": logsql, "limit": limit}).encode()
        with urllib.request.urlopen(f"{self.base}/select/logsql/query", data=body,
                                    timeout=10) as r:
            return [json.loads(line) for line in r.read().decode().splitlines() if line]


def quoted(value: str) -> str:
    """A LogsQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: How long a record may take: the SDK's log batch, the collector's batch (5 s), and
#: VictoriaLogs making fresh rows searchable (about a second).
ARRIVES_WITHIN = 120.0

#: LogsQL: the plugin's orphan records (the message's prefix). The same call's
#: unanswered-call record, when the ledger reports it too, carries its call id as well.
ORPHAN_RECORD = '_msg:"orphaned tool task:"*'
#: LogsQL: the plugin's stuck-task records (the message's prefix).
STUCK_RECORD = '_msg:"stuck tool task:"*'
