"""A forked worker (gunicorn's pre-fork model, multiprocessing's ``fork``) inherits the
parent's span buffer: what the parent held is the parent's to send. The child must
send only its own spans, with a sender of its own, and the parent still sends its own:
every span reaches the receiver exactly once. Real pipeline, real fork, real OTLP
receiver; what the receiver decodes is the oracle."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from .otlp_receivers import HttpReceiver

CHILD = Path(__file__).with_name("fork_child.py")


@pytest.fixture
def rx() -> Iterator[HttpReceiver]:
    r = HttpReceiver()
    yield r
    r.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform has no fork()")
def test_a_forked_child_sends_only_its_own_spans(rx: HttpReceiver) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(CHILD), rx.endpoint], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "child=0 parent_flushed=True" in out.stdout, (out.stdout, out.stderr)
    expected = {"before-fork-1": 1, "before-fork-2": 1, "child": 1, "parent": 1}

    def names() -> Counter[str]:
        return Counter(span.name for _, _, span in rx.received.spans())

    assert rx.received.wait_for(lambda: sum(names().values()) >= 4), names()
    assert names() == expected
