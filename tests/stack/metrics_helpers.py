"""The metrics side of the stack tests: Prometheus 3 and Alertmanager started as
deploy/compose runs them (their flags from docker-compose.yml, their configs as
committed, only addresses rewritten), their HTTP APIs, and the agent processes of
tests/stack/metrics_app.py."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..stack_programs import REPO, Program, free_port, rewrite, write_yaml

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES_DIR = DEPLOY / "prometheus" / "rules"
ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"
APP = Path(__file__).with_name("metrics_app.py")


def compose_service(name: str) -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"][name]
    return service


def _flags(service: str, mounts: Mapping[str, str]) -> list[str]:
    """The service's command flags, container paths replaced by the test's."""
    out = []
    for arg in compose_service(service)["command"]:
        flag, sep, value = str(arg).partition("=")
        out.append(f"{flag}={mounts.get(flag, value)}" if sep else flag)
    return out


class Api:
    """GET/POST on a Prometheus-style HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=15) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def post(self, path: str, body: Any) -> int:
        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=15) as r:
            return int(r.status)

    def query(self, expr: str, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = self.get("/api/v1/query", query=expr, **params)
        return body

    def query_range(self, expr: str, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = self.get("/api/v1/query_range", query=expr, **params)
        return body

    def scalar(self, expr: str) -> float | None:
        """The first value of an instant query, None when it returns nothing."""
        res = self.query(expr)["data"]["result"]
        return float(res[0]["value"][1]) if res else None


def prometheus(workdir: Path, addresses: Mapping[str, str], *,
               config: dict[str, Any] | None = None, rules_dir: Path = RULES_DIR,
               listen: str = "127.0.0.1", port: int | None = None,
               label: str = "prometheus", container: Container | None = None,
               ) -> tuple[Program, Api]:
    """Prometheus 3 with deploy/prometheus/prometheus.yml (or ``config``) as committed,
    ``addresses`` rewritten (stack_programs.rewrite), its rules read from
    ``rules_dir``, and the compose service's flags; in ``container`` when given
    (listening on all its addresses, as in the compose service)."""
    port = port or free_port()
    cfg = rewrite(config or yaml.safe_load(PROMETHEUS_YML.read_text()),
                  {**addresses, "localhost:9090": f"127.0.0.1:{port}"})
    cfg["rule_files"] = [str(rules_dir / "*.yml")]
    path = write_yaml(workdir / f"{label}.yml", cfg)
    args = _flags("prometheus", {"--config.file": str(path),
                                 "--storage.tsdb.path": str(workdir / f"{label}-data")})
    args += [f"--web.listen-address={listen}:{port}", "--log.level=info"]
    return _served("prometheus", args, workdir, label, listen, port, container)


def alertmanager(workdir: Path, addresses: Mapping[str, str], *,
                 config: dict[str, Any] | None = None, label: str = "alertmanager",
                 listen: str = "127.0.0.1", port: int | None = None,
                 container: Container | None = None) -> tuple[Program, Api]:
    """Alertmanager with deploy/alertmanager/alertmanager.yml (or ``config``), addresses
    rewritten, and the compose service's flags; clustering off (one instance); in
    ``container`` when given."""
    port = port or free_port()
    cfg = rewrite(config or yaml.safe_load(ALERTMANAGER_YML.read_text()), addresses)
    path = write_yaml(workdir / f"{label}.yml", cfg)
    args = _flags("alertmanager", {"--config.file": str(path),
                                   "--storage.path": str(workdir / f"{label}-data")})
    args += [f"--web.listen-address={listen}:{port}", "--cluster.listen-address="]
    return _served("alertmanager", args, workdir, label, listen, port, container)


def _served(name: str, args: list[str], workdir: Path, label: str, listen: str, port: int,
            container: Container | None) -> tuple[Program, Api]:
    """The program (in ``container`` when given), ready once ``/-/ready`` answers, and
    the API where a client reaches it."""
    reach = container.address if container else listen
    prog = Program(name, args, workdir, ready_url=f"http://{reach}:{port}/-/ready",
                   label=label, wrapper=container.prefix if container else ())
    return prog, Api(f"http://{reach}:{port}")


@contextlib.contextmanager
def metrics_app(workdir: Path, mode: str, service: str, *args: str,
                env: Mapping[str, str] | None = None, timeout: float = 180.0,
                wrap: list[str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """tests/stack/metrics_app.py running ``mode`` until the block ends; yields once it
    printed ``ready`` (every scenario recorded). ``wrap`` prefixes the command (e.g.
    ``ip netns exec NAME``)."""
    log = workdir / f"app-{service}.log"
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("OTEL_", "ADK_TASK_TELEMETRY_"))}
    environ.update({"PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
                    **(env or {})})
    with log.open("wb") as err:
        proc = subprocess.Popen([*(wrap or []), sys.executable, str(APP), mode, service,
                                 *args], cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=environ)
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if readable else ""
        assert line.strip() == "ready", (
            f"metrics app {service} not ready (exit {proc.poll()}): {line!r}\n"
            f"{log.read_text(errors='replace')[-3000:]}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def otlp_env(prometheus_url: str) -> dict[str, str]:
    """configure_telemetry's variables for metrics straight into Prometheus 3's OTLP
    receiver (no traces or logs: Prometheus takes metrics only). The export interval is
    left to the SDK's default (60 s)."""
    return {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{prometheus_url}/api/v1/otlp/v1/metrics",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}


class Webhook:
    """An Alertmanager webhook receiver of the test's own: every POST body, by path."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        import http.server
        import threading

        received: list[tuple[str, dict[str, Any]]] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, json.loads(body or b"{}")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Webhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def alerts(self, path_prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(receiver path, alert) for every alert of every notification so far."""
        return [(path, alert) for path, body in list(self.received)
                if path.startswith(path_prefix) for alert in body.get("alerts", [])]


class Container:
    """A network namespace standing for one compose service's container.

    A veth pair joins it to the host: the host end's address is what Docker's
    ``host-gateway`` names (the bridge's address, seen from inside), the other end is
    the container's. ``ip netns exec`` bind-mounts /etc/netns/NAME/hosts over
    /etc/hosts, written here as Docker writes a container's: localhost, and one line
    per ``extra_hosts`` entry of the service in docker-compose.yml (``host-gateway``
    -> the host end's address). Nothing else of the host's network is visible inside.
    """

    def __init__(self, service: str, index: int) -> None:
        self.service = service
        self.name = f"adkm{os.getpid() % 100000}{index}"
        net = 200 + (os.getpid() + index) % 50
        self.gateway = f"10.{net}.{index}.1"
        self.address = f"10.{net}.{index}.2"
        self.etc = Path("/etc/netns") / self.name
        self.hosts: list[str] = ["127.0.0.1 localhost"]
        for entry in compose_service(service).get("extra_hosts") or []:
            host, _, target = str(entry).partition(":")
            self.hosts.append(f"{self.gateway if target == 'host-gateway' else target} {host}")

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def __enter__(self) -> Container:
        host_if, inner_if = f"vh{self.name}"[:15], f"vc{self.name}"[:15]
        self.etc.mkdir(parents=True, exist_ok=True)
        (self.etc / "hosts").write_text("\n".join(self.hosts) + "\n")
        # No DNS server answers inside: a name not in hosts does not resolve.
        (self.etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        self._ip("netns", "add", self.name)
        self._ip("link", "add", host_if, "type", "veth", "peer", "name", inner_if)
        self._ip("link", "set", inner_if, "netns", self.name)
        self._ip("addr", "add", f"{self.gateway}/24", "dev", host_if)
        self._ip("link", "set", host_if, "up")
        for args in (("addr", "add", f"{self.address}/24", "dev", inner_if),
                     ("link", "set", inner_if, "up"), ("link", "set", "lo", "up")):
            self._ip("netns", "exec", self.name, "ip", *args)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ip("link", "del", f"vh{self.name}"[:15])
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ip("netns", "del", self.name)
        for f in ("hosts", "resolv.conf"):
            with contextlib.suppress(FileNotFoundError):
                (self.etc / f).unlink()
        with contextlib.suppress(OSError):
            self.etc.rmdir()


def can_make_namespaces() -> str | None:
    """None when this process may create network namespaces, else why not."""
    import shutil

    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    return None
