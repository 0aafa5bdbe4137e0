"""The words the terminal and the HTML report both print for a result, written once so
the two read the same: a duration, a task's outcome, what became of an orphan."""

from __future__ import annotations

from .. import semconv as sc
from .results import Orphan, Task


def fmt_duration(seconds: float) -> str:
    """``12 us``, ``3.4 ms``, ``1.25 s``."""
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def outcome_note(t: Task, dot: str = "·") -> str:
    """A task's outcome with what explains it: the error's class, the cancel cause
    (after ``dot``, the terminal's ASCII fallback passes ``-``), an orphan still running."""
    if t.outcome == sc.Outcome.ORPHANED:
        note = "ORPHANED"
        if t.orphan is not None and t.orphan.still_running:
            note += " still running"
        return note
    if t.outcome == sc.Outcome.ERROR and t.error_type:
        return f"error {t.error_type.rsplit('.', 1)[-1]}"
    if t.outcome == sc.Outcome.RECOVERED and t.error_type:
        return f"recovered {t.error_type.rsplit('.', 1)[-1]}"
    if t.outcome == sc.Outcome.CANCELLED and t.cancel_cause:
        return f"cancelled {dot} {t.cancel_cause}"
    return t.outcome


def orphan_state(o: Orphan) -> str:
    """What became of an orphaned task after its run, in a phrase."""
    if o.still_running is True:
        return "still running when the scenario ended"
    if o.still_running is False:
        return "ended on its own after its run"
    return "outlived its run"
