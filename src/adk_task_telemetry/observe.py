"""Observers: code in this process told of every tool task's end and every
unanswered call, from every plugin instance, as it happens.

The pytest plugin is built on this; so can be any check that wants lifecycles
without an OpenTelemetry pipeline. An observer runs inside the plugin's callback:
it must be quick, and what it raises is swallowed (counted in the plugin's
``internal_errors``), never passed to ADK.
"""

from __future__ import annotations

from collections.abc import Callable

from .engine.records import TaskSeen, UnansweredCall

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
