"""Where a tracker finds its runs: a context variable, and an index by invocation id.

A run is one ``run_async``/``run_live`` call. Its ``RunHolder`` is set in a context
variable at ``before_run``; the run's tool tasks copy the context when ADK creates
them, so code of the run finds its own run there, even when two runs share an
invocation id (a client answering a long-running call while the run that made it
still works: ADK may give the answering run the same id). The index (invocation id
-> newest run, older runs of that id chained on ``RunRecord.older``) answers a
lookup by id only where the context variable cannot say (a callback that runs
outside the run's context); it is also the list of every run not ended, which the
views (``state()``, ``open_tasks()``) and the sweeps that reach every run
(``closed()``, ``shutdown()``, a dropped invocation context) iterate. This module
changes no record's state: it holds the runs that the tracker starts and ends.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator

from .records import RunHolder, RunRecord


class RunIndex:
    """The runs of one tracker that have not ended."""

    def __init__(self, name: str) -> None:
        self._runs: dict[str, RunRecord] = {}
        # The run of the code running now: set in before_run, inherited by the run's
        # tool tasks (they copy the context when ADK creates them).
        self._var: contextvars.ContextVar[RunHolder | None] = contextvars.ContextVar(
            name, default=None)

    def add(self, run: RunRecord) -> None:
        """``run`` starts here: it is the run of this context from now on (inside the
        run, if any, that this context belonged to), and the newest of its id."""
        run.holder = RunHolder(run, _live_holder(self._var.get()))
        self._var.set(run.holder)
        run.older = self._runs.get(run.invocation_id)
        self._runs[run.invocation_id] = run

    def enter(self, run: RunRecord) -> None:
        """This context runs ``run`` now (a step of it read in a task not seen yet):
        tool tasks created here find it."""
        if self._var.get() is not run.holder and run.holder is not None:
            self._var.set(run.holder)

    def of(self, invocation_id: str) -> RunRecord | None:
        """The run of invocation ``invocation_id`` that the calling code belongs to."""
        holder = self._var.get()
        while holder is not None:
            run = holder.run
            if run is not None and run.invocation_id == invocation_id:
                return run
            holder = holder.parent
        return self._runs.get(invocation_id)

    def __iter__(self) -> Iterator[RunRecord]:
        for head in list(self._runs.values()):
            run: RunRecord | None = head
            while run is not None:
                yield run
                run = run.older

    def forget(self, run: RunRecord) -> None:
        """Takes an ending run out of the index; its holder lets go of it (``run.ended``
        from now on), so a context that outlives the run keeps nothing."""
        head = self._runs.get(run.invocation_id)
        if head is run:
            if run.older is not None:
                self._runs[run.invocation_id] = run.older
            else:
                del self._runs[run.invocation_id]
        else:
            while head is not None and head.older is not run:
                head = head.older
            if head is not None:
                head.older = run.older
        run.older = None
        if run.holder is not None:
            run.holder.run = None
            run.holder = None


def _live_holder(holder: RunHolder | None) -> RunHolder | None:
    while holder is not None and holder.run is None:
        holder = holder.parent
    return holder
