"""Every tracker of the process: whether any holds a run, and their sweep at process exit.

A tracker adds itself here when it is made (held weakly: a plugin that is gone takes
its tracker with it). Each plugin made puts ``shutdown_all`` on process_exit.py's ordered
list (``register_shutdown``; the list keeps it once): at interpreter exit or SIGTERM,
runs still in flight in every tracker end with trigger ``shutdown``, their orphans
reported before anything is flushed. This module changes no record's state: each
tracker's ``shutdown`` does.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Protocol

from ..lifecycle import process_exit as _exit
from .records import TrackerState


class Sweepable(Protocol):
    """A tracker, as the exit sweep sees it."""

    def shutdown(self) -> int:
        """Ends every run now; returns the number of orphans it reported."""
        ...

    def state(self) -> TrackerState:
        """What it holds now (its runs alive among it)."""
        ...


_trackers: weakref.WeakSet[Sweepable] = weakref.WeakSet()


def add(tracker: Sweepable) -> None:
    """A tracker was made (held weakly: it goes with its plugin)."""
    _trackers.add(tracker)


def any_run_alive() -> bool:
    """Whether any tracker holds a run now (a plugin's close reads it: ADK records
    its own metrics inside runs)."""
    return any(t.state().runs for t in list(_trackers))


def shutdown_all() -> int:
    """Ends every run of every tracker with the ``shutdown`` trigger (process exit)."""
    total = 0
    for tracker in list(_trackers):
        with contextlib.suppress(Exception):
            total += tracker.shutdown()
    return total


def register_shutdown() -> None:
    """Process exit runs shutdown_all first, then flushes (process_exit.py's ordered list)."""
    _exit.add_exit_sweep(shutdown_all)
    _exit.install()
