"""Observers: code in this process told of every tool task's end and every
unanswered call, from every plugin instance, as it happens.

The pytest plugin is built on this; so can be any check that wants lifecycles
without an OpenTelemetry pipeline. An observer runs inside the plugin's callback:
it must be quick, and what it raises is swallowed (counted in the plugin's
``internal_errors``), never passed to ADK.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import semconv as sc
from .engine.records import TaskSeen, UnansweredCall

logger = logging.getLogger(sc.LOGGER_NAME)

Seen = TaskSeen | UnansweredCall
Observer = Callable[[Seen], None]

#: The registered observers; empty in production, so the hot path tests one list.
observers: list[Observer] = []


def add_observer(observer: Observer) -> None:
    if observer not in observers:
        observers.append(observer)


def remove_observer(observer: Observer) -> None:
    if observer in observers:
        observers.remove(observer)


def tell(seen: Seen, log: int = 0) -> int:
    """Tells every observer of ``seen``; what one raises is swallowed. Returns how many
    raised (the plugin counts them in ``internal_errors``); the first ``log`` of them
    are logged with their traceback (the tracker logs its first ten failures)."""
    failed = 0
    for observer in list(observers):
        try:
            observer(seen)
        except Exception:
            failed += 1
            if failed <= log:
                logger.exception("adk_task_telemetry: internal error in observer (ignored)")
    return failed
