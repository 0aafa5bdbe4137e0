"""One signal's OTLP export: spans or the SDK's batches go into a buffer, a thread of
ours sends them.

Spans: our span processor (sdk_side.py's ``SpanHandOver``) appends each ended, sampled
span to the traces buffer's inbox (buffer.py) and returns; no SDK BatchSpanProcessor
sits in front (its queue and worker thread would be a second buffer and a second
thread per span). The sender thread batches them as the SDK's processor would: a full
batch (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``) goes at once, a partial one after
``OTEL_BSP_SCHEDULE_DELAY``, everything at a flush. Metrics and logs: the SDK's
periodic reader and log batch processor call our exporter, which only puts the batch
into the signal's bounded buffer and returns. Either way nothing of the SDK's waits on
the network. The signal's sender thread, started with the setup (never at interpreter
exit: Python 3.12 refuses new threads there), sends the buffer in order. While the
endpoint fails, the batch stays at the head and is tried again every ``RETRY_S``, and
each span that ends is taken into the buffer at its end, measured (``Sender.wake``):
it will wait, so the bounds must hold for it now, not when an attempt that may take
the whole export timeout returns. A batch the endpoint rejects for good (HTTP 400,
gRPC INVALID_ARGUMENT) is dropped and counted. Each outage is told twice, per signal:
when it starts, and when it ends with the numbers kept and dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from .. import semconv as sc
from . import outage
from .buffer import Buffer, log_size, metrics_size, span_size
from .settings import BufferBounds, OtlpTarget, SpanBatching

logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)

#: Seconds between attempts while an endpoint fails (each attempt may itself take
#: up to the export timeout, the exporter's own retries included).
RETRY_S = 1.0
REJECTED = sc.ExportDropReason.REJECTED
# An exporter that raises may have met a passing fault (a timeout that went negative
# in a retry loop); the same batch raising this often in a row is given up.
_RAISES_TO_REJECT = 3
EXIT_BUDGET = sc.ExportDropReason.EXIT_BUDGET
UNITS = {"traces": ("span", "spans"), "metrics": ("metric batch", "metric batches"),
         "logs": ("log record", "log records")}
# Items per export: the SDK's batches are re-cut at this size when a backlog is sent
# (traces: SpanBatching's size).
_BATCH = {"traces": 512, "metrics": 1, "logs": 512}
# The context key of suppress_instrumentation() (the SDK's batch processors set it
# around their exports too): an instrumented HTTP client must not trace our exports.
_SUPPRESS_KEY: str = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY",
                             "suppress_instrumentation")
_SIZE_OF = {"traces": span_size, "metrics": metrics_size, "logs": log_size}


def count(n: int, signal: str) -> str:
    one, many = UNITS[signal]
    return f"{n:,} {one if n == 1 else many}"


@dataclass(frozen=True)
class SignalStatus:
    """One signal's export, as ``TelemetryHandle.export_status()`` reports it."""

    signal: str
    endpoint: str
    failing: bool
    buffered: int  # items waiting (the batch in flight included)
    buffered_bytes: int  # their estimated encoded size
    sent: int
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> items


class Sender:
    """One signal's buffer, the thread that sends it, and that export's health."""

    def __init__(self, target: OtlpTarget, inner: Any, bounds: BufferBounds,
                 quiet: outage.QuietExporterLogs,
                 on_drop: Callable[[str, str, int], None],
                 batching: SpanBatching | None = None) -> None:
        """``batching``: items come one at a time (spans, through ``SpanHandOver``) and
        the sender batches them; None: they come in batches already (``put``)."""
        self.signal = target.signal
        self.target = target
        self.where = f"{target.endpoint} over OTLP {target.protocol}"
        self.inner = inner
        self.batch = batching.size if batching else _BATCH[self.signal]
        self._delay = batching.delay_s if batching else 0.0
        #: Inbox length at which SpanHandOver calls ``wake`` (every span: no delay, or
        #: while the endpoint fails, when ``wake`` takes each span in measured).
        self._wake_normally = self.batch if self._delay > 0 else 1
        self.wake_at = self._wake_normally
        self._due = 0.0  # when a partial batch goes (the delay after the last send)
        self._draining = 0  # flushes waiting: send what there is, however little
        self._push = False  # a processor's force_flush: send what there is, once
        self._awake = False  # the sender was told that a batch is in the inbox
        self.buffer = Buffer(bounds, _SIZE_OF[self.signal],
                             unmeasured=2 * self.batch if batching else 0)
        self._quiet = quiet
        self._on_drop = on_drop
        self.failing = False
        self.succeeded = False  # the endpoint answered at least once
        self.closing = False  # an exit is under way: it tells what fails
        self.last_cause = ""
        self._stopped = False
        self._kicked = False
        self._next_try = 0.0
        self._attempts = 0  # attempts finished
        self._outage_start = 0.0
        self._dropped_at_ok = 0  # dropped so far at the last success: an outage's drops
        # include those made while its first attempt was still in flight
        self._told_rejection = False
        self._raised_in_a_row = 0
        self._thread = self._start()
        if hasattr(os, "register_at_fork"):  # a forked worker gets a sender of its own
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _restart(ref))

    def _start(self) -> threading.Thread:
        t = threading.Thread(target=self._run, daemon=True,
                             name=f"adk_task_telemetry-export-{self.signal}")
        t.start()
        return t

    # --- from the SDK's threads ----------------------------------------------------

    def put(self, items: Sequence[Any]) -> None:
        dropped = self.buffer.put(items)
        if dropped:
            self._on_drop(self.signal, sc.ExportDropReason.BUFFER_FULL, dropped)

    def wake(self) -> None:
        """A batch is in the inbox (``SpanHandOver``): tells the sender once. While the
        endpoint fails, or past ``spill_at`` (the sender is busy on the network), takes
        them in here, measured: they will wait, so the bounds must see them now, not
        when the sender is back from an attempt that may take the export timeout."""
        buf = self.buffer
        spill = self.failing or len(buf.inbox) >= buf.spill_at
        if self._awake and not spill:
            return
        dropped = 0
        with buf.cond:
            if spill:
                dropped = buf.absorb()
            # Failing, the sender waits for its next try: not woken for each span. Read
            # under the lock: a sender that recovered since then looks at the buffer
            # before it waits again, and this span is there.
            if not self.failing:
                self._awake = True
                buf.cond.notify_all()
        if dropped:
            self._on_drop(self.signal, sc.ExportDropReason.BUFFER_FULL, dropped)

    def _take_in(self) -> None:
        """Moves the inbox into the buffer, counting what that drops (``cond`` held)."""
        dropped = self.buffer.absorb()
        if dropped:
            self._on_drop(self.signal, sc.ExportDropReason.BUFFER_FULL, dropped)

    # --- the sender thread ---------------------------------------------------------

    def _run(self) -> None:
        # Not traced: an instrumented HTTP client must not make spans of our exports.
        otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
        buf = self.buffer
        while True:
            with buf.cond:
                while True:
                    if self._stopped:
                        return
                    self._take_in()
                    n = buf.waiting()
                    now = time.monotonic()
                    if not n:
                        wait: float | None = self._delay or None  # an inbox is polled
                    elif self.failing and not self._kicked:
                        wait = self._next_try - now
                    elif (n >= self.batch or self._kicked or self._draining or self._push
                          or buf.closed):
                        break
                    else:
                        wait = self._due - now  # a partial batch waits for the delay
                    if wait is not None and wait <= 0:
                        break
                    self._awake = False
                    buf.cond.wait(wait)
                self._kicked = False
                batch = buf.take(self.batch)
                if self._push and not buf.waiting():
                    self._push = False  # all of what there was is out
                self._due = now + self._delay
            self._attempt(batch)

    def _attempt(self, batch: list[Any]) -> None:
        self._quiet.take()  # a stale message is not this attempt's cause
        raised = False
        try:
            result = self._send(batch)
            ok = getattr(result, "name", "") == "SUCCESS"
            text = "" if ok else self._quiet.take()
        except Exception as exc:  # an exporter must never take the sender down
            # What it logged before it raised (a retry's cause) says more than the raise.
            ok, raised = False, True
            text = self._quiet.take() or f"{type(exc).__name__}: {exc}"
        self._raised_in_a_row = self._raised_in_a_row + 1 if raised else 0
        if ok:
            self.buffer.done(True)
            self._recovered(len(batch))
        elif self._stopped:
            self.buffer.done(False)  # the exit counts what is left
        elif (raised and self._raised_in_a_row >= _RAISES_TO_REJECT) or outage.rejected(text):
            self.buffer.done(False, REJECTED)
            self._on_drop(self.signal, REJECTED, len(batch))
            self._rejected(len(batch), text)
        else:
            extra = self.buffer.done(False)
            if extra:
                self._on_drop(self.signal, sc.ExportDropReason.BUFFER_FULL, extra)
            self._failed(text, raised)
        with self.buffer.cond:
            self._attempts += 1
            self.buffer.cond.notify_all()

    def _send(self, batch: list[Any]) -> Any:
        if self.signal == "metrics":
            return self.inner.export(batch[0], timeout_millis=self.target.timeout * 1000)
        return self.inner.export(batch)

    def _failed(self, text: str, raised: bool = False) -> None:
        self._next_try = time.monotonic() + RETRY_S
        if self.failing:
            return
        self.failing = True
        self.wake_at = 1  # each span that ends now waits: measured as it comes (wake)
        self._outage_start = time.monotonic()
        # An exporter that raised (a retry loop's timeout gone negative) says nothing
        # of the endpoint: the socket tells.
        self.last_cause = ((raised and outage.probe(self.where))
                           or outage.cause(text, self.target.timeout, self.where))
        if self.closing:
            return  # the exit's own line names it
        bounds = self.buffer.bounds
        logger.warning(
            "adk_task_telemetry: cannot export %s to %s (%s). Keeping them in a buffer "
            "(up to %s or %d MiB, then the oldest are dropped and counted) and retrying; "
            "the agent is not affected. Recovery will be logged.",
            self.signal, self.where, self.last_cause, count(bounds.items, self.signal),
            bounds.bytes >> 20)

    def _recovered(self, just_sent: int) -> None:
        self.succeeded = True
        total = sum(self.buffer.dropped.values())
        if not self.failing:
            self._dropped_at_ok = total
            return
        self.failing = False
        self.wake_at = self._wake_normally
        held = self.buffer.held()[0] + just_sent
        dropped, self._dropped_at_ok = total - self._dropped_at_ok, total
        logger.warning(
            "adk_task_telemetry: export of %s to %s works again after %.1f s; %s held "
            "through the outage are being sent, %s dropped.",
            self.signal, self.where, time.monotonic() - self._outage_start,
            count(held, self.signal), count(dropped, self.signal))

    def _rejected(self, n: int, text: str) -> None:
        self.succeeded = True  # it answered
        if self._told_rejection:
            return
        self._told_rejection = True
        logger.warning(
            "adk_task_telemetry: %s rejected %s (%s): dropped; later rejections are only "
            "counted (adk.export.dropped, reason rejected).",
            self.where, count(n, self.signal),
            outage.cause(text, self.target.timeout, self.where))

    # --- flush, exit ---------------------------------------------------------------

    def push(self) -> None:
        """Send what is buffered now without waiting for a full batch or the delay
        (what the SDK's BatchSpanProcessor.force_flush did); does not wait."""
        with self.buffer.cond:
            self._push = True
            self.buffer.cond.notify_all()

    def kick(self) -> int:
        """Try now, even while failing (a flush asks); returns the attempts so far."""
        with self.buffer.cond:
            self._kicked = True
            self.buffer.cond.notify_all()
            return self._attempts

    def wait_sent(self, deadline: float, give_up_on_failure_after: int | None = None) -> bool:
        """Waits until everything buffered was sent (True), or the deadline, or an
        attempt that started after ``give_up_on_failure_after`` attempts has failed."""
        buf = self.buffer
        with buf.cond:
            self._draining += 1  # a partial batch goes at once meanwhile
            buf.cond.notify_all()
            try:
                while buf.waiting() or buf.in_flight():
                    if (give_up_on_failure_after is not None and self.failing
                            and self._attempts > give_up_on_failure_after):
                        return False
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stopped:
                        return False
                    buf.cond.wait(left)
                return True
            finally:
                self._draining -= 1

    def stop(self) -> None:
        """Stops the sender and interrupts the export in flight (retry backoffs end,
        gRPC calls are cancelled; a black-holed HTTP request cannot be stopped)."""
        with self.buffer.cond:
            self._stopped = True
            self.buffer.cond.notify_all()
        try:
            self.inner.shutdown()
        except Exception:
            logger.debug("exporter shutdown failed", exc_info=True)

    def wait_idle(self, deadline: float) -> None:
        """After stop(): waits (to ``deadline``) for the attempt in flight to return."""
        buf = self.buffer
        with buf.cond:
            while buf.in_flight() and time.monotonic() < deadline:
                buf.cond.wait(max(0.0, deadline - time.monotonic()))

    def give_up(self) -> int:
        """Drops and counts everything not sent (the exit's budget is spent)."""
        n = self.buffer.drop_all(EXIT_BUDGET)
        n += self.buffer.in_flight()  # a black-holed request: it will not be answered
        if n:
            self._on_drop(self.signal, EXIT_BUDGET, n)
        return n

    def status(self) -> SignalStatus:
        # One snapshot, under one hold of the lock: a failed attempt put back in between
        # would trim, and what is held and what was dropped would not add up.
        buf = self.buffer
        with buf.cond:
            self._take_in()  # the bounds apply to what the inbox holds too
            held, size = buf.held()
            return SignalStatus(self.signal, self.target.endpoint, self.failing, held, size,
                                buf.sent, dict(buf.dropped))

    @property
    def proven(self) -> bool:
        return self.succeeded and not self.failing


def _restart(ref: weakref.ref[Sender]) -> None:
    """In a forked child: a sender of its own, with an empty buffer (what the parent
    held is the parent's to send; the SDK's batch processor clears its queue too)."""
    sender = ref()
    if sender is not None:
        sender.buffer.reset()
        sender._awake = sender._push = False
        sender._draining = 0
        sender._thread = sender._start()
