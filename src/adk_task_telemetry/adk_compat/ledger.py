"""Session reads of the call ledger: which function calls and responses reached the
session (what the next model turn reads).

Unlike the rest of ``adk_compat``, these two read ADK's ``Event`` and ``Session``
models directly and raise (``AttributeError``, ``TypeError``) on a shape they do not
recognise: ``function_parts`` runs once per event on the plugin's hot path, where a
guard would cost every event, and an empty answer would silently drop the ledger.
Their callers catch that and count it as the plugin's internal error, logged
(``plugin.on_event_callback`` and the tracker's ``_unanswered``, through
``Tracker.failed``): the run goes on, the ledger of that run is not reported.
"""

from __future__ import annotations

from typing import Any


def function_parts(event: Any) -> tuple[list[str], list[str]] | None:
    """``(call ids, response ids)`` of an event's function parts, without the calls
    ADK marks long-running (``long_running_tool_ids``: a long-running tool, a
    confirmation or credential request), which a later invocation answers. None for
    an event without any (most events: one look at its parts). Partial (streamed)
    events are skipped: their final event repeats them."""
    content = event.content
    parts = content.parts if content is not None else None
    if not parts or event.partial:
        return None
    calls: list[str] = []
    answered: list[str] = []
    for part in parts:
        fc = part.function_call
        if fc is not None:
            calls.append(fc.id or "")
        else:
            fr = part.function_response
            if fr is not None:
                answered.append(fr.id or "")
    if not calls and not answered:
        return None
    if calls:
        later = event.long_running_tool_ids
        if later:
            calls = [c for c in calls if c not in later]
    return calls, answered


def unanswered_in_session(ctx: Any, pending: dict[str, int], since_s: float
                          ) -> list[tuple[str, str, str]]:
    """``(call id, tool, author)`` of each call of ``pending`` (call id -> how many
    calls of that id the run made and saw no response to) that the session stores
    without a stored response: the session is what the next model turn reads. In the
    order the model made them.

    One pass over the session's events from the newest back to the run's start
    (``since_s``, Unix seconds; a second of slack for clocks that store events
    coarsely), looking only at the pending ids.
    """
    events = getattr(getattr(ctx, "session", None), "events", None)
    if not events:
        return []
    stored: dict[str, list[tuple[str, str]]] = {}  # newest first
    answered: dict[str, int] = {}
    floor = since_s - 1.0
    for event in reversed(events):
        if (getattr(event, "timestamp", None) or floor) < floor:
            break
        for fc in reversed(event.get_function_calls()):
            if fc.id in pending:
                stored.setdefault(fc.id, []).append((str(fc.name or ""),
                                                     str(event.author or "")))
        for fr in event.get_function_responses():
            if fr.id in pending:
                answered[fr.id] = answered.get(fr.id, 0) + 1
    out: list[tuple[str, str, str]] = []
    for call_id, made in stored.items():
        left = min(pending[call_id], len(made) - answered.get(call_id, 0))
        out.extend((call_id, tool, author) for tool, author in made[:max(left, 0)])
    return out[::-1]
