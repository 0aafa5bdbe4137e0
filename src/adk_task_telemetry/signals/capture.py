"""Opt-in capture of tool arguments and results: redacted, then truncated.

Tool arguments and results can hold personal data, so nothing is recorded unless
``TaskTelemetryPlugin(capture_arguments=True)``; even then every value passes
through a redaction hook the application can replace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

#: ``redact(tool_name, value) -> value``: what to record instead of ``value``
#: (return None to record nothing).
Redactor = Callable[[str, Any], Any]

REDACTED = "[REDACTED]"
_SENSITIVE = re.compile(
    r"pass(word|wd)?|secret|token|api[-_]?key|auth|credential|cookie|session|bearer|"
    r"private[-_]?key|ssn|social|card|cvv|iban|account",
    re.IGNORECASE,
)


def default_redactor(tool_name: str, value: Any) -> Any:
    """Masks values stored under keys that look sensitive, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and _SENSITIVE.search(k)
                else default_redactor(tool_name, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [default_redactor(tool_name, v) for v in value]
    return value


def to_attribute(value: Any, limit: int) -> str:
    """A JSON rendering of ``value``, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, default=repr, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):  # keys that are not strings, cycles
        text = repr(value)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "\u2026"
