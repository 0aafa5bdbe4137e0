"""TaskTelemetryPlugin's options as the environment gives them.

The plugin reads its ``ADK_TASK_TELEMETRY_*`` options here (the names are constants of
``variables.py``, as every variable's), not in ``configure/``: importing the plugin must
not load ``configure_telemetry()``'s providers and exporters, or the OpenTelemetry SDK
they stand on. An argument given to the plugin wins over its variable; a bad value warns
once (on the ``adk_task_telemetry.export`` logger, beside configure's own warnings) and
never stops the agent. Pure functions over a mapping (``os.environ`` by default).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from . import semconv as sc
from . import variables as v

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    """The variable ``name`` as a whole number above zero (``_`` separators allowed), or
    ``default`` when it is unset; a bad value warns and gives ``default``."""
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        logger.warning("adk_task_telemetry: %s=%r is not a positive whole number; using %d",
                       name, raw, default)
        return default
    return value


@dataclass(frozen=True)
class PluginOptions:
    """TaskTelemetryPlugin's options as the environment gives them (the defaults where a
    variable is unset or bad: a bad value warns once and never stops the agent)."""

    capture_arguments: bool = False
    max_argument_length: int = 1024
    cancel_orphans: bool = False
    track_spawned_tasks: bool = False
    max_open_tasks: int = 10_000
    stuck_after: float = 120.0
    debug_port: str | None = None
    debug_host: str = "127.0.0.1"


def plugin_options(environ: Mapping[str, str] | None = None) -> PluginOptions:
    """ADK_TASK_TELEMETRY_{CAPTURE_ARGUMENTS,MAX_ARGUMENT_LENGTH,CANCEL_ORPHANS,
    TRACK_SPAWNED_TASKS,MAX_OPEN_TASKS,STUCK_AFTER,DEBUG_PORT,DEBUG_HOST}; an argument
    given to the plugin wins over them."""
    env = os.environ if environ is None else environ
    d = PluginOptions()

    def flag(name: str, default: bool) -> bool:
        raw = _get(env, name)
        if raw is None:
            return default
        if raw.strip().lower() not in ("true", "false"):
            logger.warning("adk_task_telemetry: %s=%r is not true or false; using %s",
                           name, raw, str(default).lower())
            return default
        return raw.strip().lower() == "true"

    length = _get(env, v.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH)
    max_arg = d.max_argument_length
    if length is not None:
        max_arg = -1
        with contextlib.suppress(ValueError):
            max_arg = int(length.replace("_", ""))
        if max_arg < 0:
            logger.warning("adk_task_telemetry: %s=%r is not a whole number >= 0; using %d",
                           v.ADK_TASK_TELEMETRY_MAX_ARGUMENT_LENGTH, length,
                           d.max_argument_length)
            max_arg = d.max_argument_length
    return PluginOptions(
        capture_arguments=flag(v.ADK_TASK_TELEMETRY_CAPTURE_ARGUMENTS, d.capture_arguments),
        max_argument_length=max_arg,
        cancel_orphans=flag(v.ADK_TASK_TELEMETRY_CANCEL_ORPHANS, d.cancel_orphans),
        track_spawned_tasks=flag(v.ADK_TASK_TELEMETRY_TRACK_SPAWNED_TASKS,
                                 d.track_spawned_tasks),
        max_open_tasks=positive_int(env, v.ADK_TASK_TELEMETRY_MAX_OPEN_TASKS,
                                     d.max_open_tasks),
        stuck_after=seconds(env, v.ADK_TASK_TELEMETRY_STUCK_AFTER, d.stuck_after),
        debug_port=_get(env, v.ADK_TASK_TELEMETRY_DEBUG_PORT),
        debug_host=_get(env, v.ADK_TASK_TELEMETRY_DEBUG_HOST) or d.debug_host,
    )


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """The variable ``name`` as a number of seconds >= 0 (0: off), or ``default`` when it
    is unset; a bad value (negative, infinite, not a number) warns and gives ``default``."""
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        logger.warning("adk_task_telemetry: %s=%r is not a number of seconds >= 0; using %g",
                       name, raw, default)
        return default
    return value
