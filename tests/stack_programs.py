"""The real observability programs (the Collector of deploy/, Jaeger v2, Prometheus 3,
promtool, Alertmanager, amtool, VictoriaLogs), built from their Go modules by
`make stack-bin`, run as local processes on loopback.

One place that knows where the binaries are and how to start, wait for and stop one, so
that the config checks, the end-to-end path and the scale-out tests share it.
``ADK_STACK_BIN`` names another folder of binaries (default: ``.stack/bin`` of this
checkout). Under ``make test`` (``ADK_STACK_REQUIRED=1``) a missing binary fails the test;
elsewhere it is a skip that says how to build it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = ("otelcol-adk", "jaeger", "prometheus", "promtool", "alertmanager", "amtool",
            "victoria-logs")


def bin_dir() -> Path:
    return Path(os.environ.get("ADK_STACK_BIN") or REPO / ".stack" / "bin")


def program(name: str) -> str:
    """The path of one built program; fails under make test, else skips, when missing."""
    assert name in PROGRAMS, name
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        msg = (f"{path} not built: `make stack-bin` builds the Collector, Jaeger, "
               "Prometheus, Alertmanager and VictoriaLogs from their Go modules")
        if os.environ.get("ADK_STACK_REQUIRED"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return str(path)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_ok(url: str, timeout: float = 1.0) -> bool:
    with contextlib.suppress(OSError, urllib.error.URLError), \
            urllib.request.urlopen(url, timeout=timeout) as r:
        return bool(200 <= r.status < 300)
    return False


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0,
               interval: float = 0.1) -> bool:
    """True as soon as ``predicate()`` is; False at the deadline (a positive signal)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class Program:
    """One program started with ``args`` in ``workdir``, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], workdir: Path,
                 ready_url: str | None = None, env: Mapping[str, str] | None = None,
                 label: str | None = None, wrapper: Sequence[str] = ()) -> None:
        self.name = name
        #: A command the program is started under (``unshare --mount ...`` for a hosts
        #: file of its own, ``ip netns exec NAME`` for a container's network); it must
        #: exec the program, so that the pid is its.
        self.wrapper = list(wrapper)
        self.args = list(args)
        self.workdir = workdir
        self.ready_url = ready_url
        self.env = dict(env or {})
        self.label = label or name
        self.log_path = workdir / f"{self.label}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Program:
        binary = program(self.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([*self.wrapper, binary, *self.args], stdout=log,
                                     stderr=subprocess.STDOUT, cwd=self.workdir,
                                     env={**os.environ, **self.env})
        if self.ready_url is not None:
            def ready() -> bool:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AssertionError(f"{self.label} exited {self.proc.returncode}:\n"
                                         f"{self.log()}")
                return http_ok(str(self.ready_url))
            if not wait_until(ready, timeout):
                raise AssertionError(f"{self.label} not ready in {timeout}s:\n{self.log()}")
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, tail: int = 6000) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-tail:]

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (the programs drain on it), SIGKILL past ``timeout``; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@contextlib.contextmanager
def running(*programs: Program, timeout: float = 60.0) -> Iterator[tuple[Program, ...]]:
    """Start each in order, stop all in reverse order, whatever happens."""
    started: list[Program] = []
    try:
        for p in programs:
            started.append(p)
            p.start(timeout)
        yield tuple(programs)
    finally:
        for p in reversed(started):
            p.stop()


def check(name: str, args: Sequence[str], cwd: Path | None = None,
          timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a program to completion (validate, check-config, test rules)."""
    return subprocess.run([program(name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def rewrite(config: Any, addresses: Mapping[str, str]) -> Any:
    """A copy of a parsed config with every string equal to, or starting with, a key of
    ``addresses`` given that prefix's value instead: only addresses change (a k8s
    service name or 0.0.0.0:4317 -> a loopback port); every other field stays as
    committed."""
    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            for old, new in addresses.items():
                if node == old or node.startswith(old):
                    return new + node[len(old):]
                if old in node and "://" in node:
                    return node.replace(old, new)
        return node
    return walk(copy.deepcopy(config))


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
