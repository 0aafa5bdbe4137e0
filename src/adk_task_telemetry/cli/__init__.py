"""The ``adk-task-telemetry`` command (``demo``, ``audit``, ``version``), one concern a
module, from the top down:

- ``dispatch``: argument parsing, the environment (``NO_COLOR``, ``TERM``) read once,
  the exit code of a usage error or an interrupt.
- ``commands``: each command: run, hand the results to a view, print.
- ``harness``: the scenario library on the real ADK Runner, the plugin on an in-memory
  OpenTelemetry SDK; ``readback`` turns what that SDK received into results.
- ``otlp``: ``demo --otlp``: the plugin on ``configure_telemetry()``'s providers.
- ``results``: the results model (data). Three views render it and nothing else:
  ``terminal``, ``report_html`` (``--html``) and ``audit_json`` (``audit --json``);
  ``wording`` holds the words the terminal and the HTML report share.
"""

from .audit_json import SCHEMA, audit_document
from .dispatch import build_parser, main
from .harness import unseen_calls
from .results import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_ORPHANED,
    EXIT_USAGE,
    UsageError,
)

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_ORPHANED", "EXIT_USAGE",
           "SCHEMA", "UsageError", "audit_document", "build_parser", "main", "unseen_calls"]
