"""The bounded buffer that holds one signal's telemetry while its endpoint is down.

Spans come in one at a time: our span processor appends each ended span to the
buffer's ``inbox`` (a deque: no lock, nothing measured, on the thread that ended the
span, often the event loop's) and the signal's sender thread moves them into the
buffer proper. Metric and log batches come from the SDK's reader and batch processor
through ``put``. Either way the sender thread takes them out in order. Bounded by
items and by bytes (an estimate of the OTLP encoding): past either bound the OLDEST
items are dropped and counted. What goes out next is not measured (spans taken in
within the first ``unmeasured`` places, a batch put into an empty buffer): an item is
measured only once it comes to wait behind a backlog, or its export fails and it is
put back (and from then on, until an export succeeds, everything is measured as it
comes in: what arrives during an outage waits, so the bounds must see it); measuring
costs about a tenth of what encoding the span costs, for a bound that matters only
once items wait (benchmarks/bench_export.py). Should the inbox reach ``spill_at``
items before the sender takes them (it is waiting on the network), the thread that
ends spans moves them in itself, measured, so the bounds hold then too; once an export
has failed it does so at each span's end (export.py, ``Sender.wake``). Oldest,
because when the endpoint answers again the telemetry it gets is then contiguous up to
the present (dashboards, alerts and the traces of what is going on now are whole) and
the gap lies at a known place in the past, named in the recovery log line; it is also
what the SDK's own queue does when it is full.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import semconv as sc
from .settings import BufferBounds

BUFFER_FULL = sc.ExportDropReason.BUFFER_FULL


class Buffer:
    """Items waiting to be sent, oldest first; at most one batch is out (in flight),
    on top of the bounds. A size of None is an item not measured yet (the batch put
    into an empty buffer, spans taken in within the first ``unmeasured`` places, the
    batch in flight)."""

    def __init__(self, bounds: BufferBounds, size_of: Callable[[Any], int],
                 unmeasured: int = 0) -> None:
        self.bounds = bounds
        self._size_of = size_of
        #: Items appended one at a time, without the lock (spans); ``absorb`` moves them in.
        self.inbox: deque[Any] = deque()
        #: Inbox items taken in unmeasured while fewer than this wait (the next batches).
        self._slack = unmeasured
        #: Inbox length at which the appending thread moves them in itself.
        self.spill_at = max(1, min(bounds.items, 2048))
        self._items: deque[tuple[Any, int | None]] = deque()
        self._bytes = 0  # of the measured items waiting
        self._unsized = 0  # items waiting not measured yet
        #: An export failed and none has succeeded since: nothing goes out soon, so
        #: everything that comes in is measured and the bounds see it.
        self._holding = False
        self._out: list[tuple[Any, int | None]] = []  # the batch being sent
        self._out_bytes = 0
        self.cond = threading.Condition()
        self.closed = False  # no more input (the SDK shut its processor down)
        self.dropped: dict[str, int] = {}  # reason -> items
        self.sent = 0
        self.last_change = time.monotonic()

    def put(self, items: Iterable[Any]) -> int:
        """Adds items; returns how many (old ones) were dropped to stay in bounds."""
        items = list(items)
        # Measured outside the lock when they will wait; a batch that goes out next is
        # not (decided again under the lock: a failed batch may have come back since).
        sized = self._measure(items) if self._backlog() else None
        with self.cond:
            if sized is None and self._backlog():
                sized = self._measure(items)
            if sized is None:
                self._items.extend([(item, None) for item in items])
                self._unsized += len(items)
            else:
                self._measure_waiting()  # the batch ahead now waits too
                for pair in sized:
                    self._items.append(pair)
                    self._bytes += pair[1]
            dropped = self._trim()
            self.cond.notify_all()
        return dropped

    def absorb(self) -> int:
        """Moves the inbox into the buffer (call with ``cond`` held); returns how many
        (old ones) were dropped to stay in bounds. Unmeasured within the first
        ``unmeasured`` places (what goes out in the next batches), measured beyond:
        under a steady load nearly nothing is measured, in a backlog nearly all."""
        inbox = self.inbox
        n = len(inbox)  # what is appended meanwhile stays for the next time
        if not n:
            return 0
        items, pop = self._items, inbox.popleft
        room = 0 if self._holding else self._slack - len(items)
        if room > 0:
            k = min(room, n)
            for _ in range(k):
                items.append((pop(), None))
            self._unsized += k
            n -= k
        if n:
            size_of, total = self._size_of, 0
            for _ in range(n):
                item = pop()
                size = size_of(item)
                items.append((item, size))
                total += size
            self._bytes += total
        return self._trim()

    def _backlog(self) -> bool:
        """Something waits or is out, or an outage holds everything: an item put now
        will wait, so it is measured."""
        return bool(self._items or self._out or self._holding)

    def reset(self) -> None:
        """Forgets everything (a forked child: what it inherited is its parent's to send)."""
        self._holding = False
        self.inbox.clear()
        self._items.clear()
        self._out = []
        self._bytes = self._unsized = self._out_bytes = 0
        self.cond = threading.Condition()

    def _measure(self, items: list[Any]) -> list[tuple[Any, int]]:
        size_of = self._size_of
        return [(item, size_of(item)) for item in items]

    def _measure_waiting(self) -> None:
        """Measures the items waiting that were not (``cond`` held)."""
        if self._unsized:
            size_of, added = self._size_of, 0
            measured: deque[tuple[Any, int | None]] = deque()
            for item, size in self._items:
                if size is None:
                    size = size_of(item)
                    added += size
                measured.append((item, size))
            self._items = measured
            self._bytes += added
            self._unsized = 0

    def _measure_out(self) -> None:
        """Measures the batch in flight where it was not (``cond`` held)."""
        if any(size is None for _, size in self._out):
            self._out = [(item, self._size_of(item) if size is None else size)
                         for item, size in self._out]
            self._out_bytes = sum(size or 0 for _, size in self._out)

    def _trim(self) -> int:
        """Drops the oldest items until the bounds hold again (``cond`` held)."""
        dropped = 0
        while self._items and self._over():
            _, size = self._items.popleft()
            if size is None:
                self._unsized -= 1
            else:
                self._bytes -= size
            dropped += 1
        if dropped:
            self.dropped[BUFFER_FULL] = self.dropped.get(BUFFER_FULL, 0) + dropped
        return dropped

    def _over(self) -> bool:
        # The batch in flight (at most one export's worth) comes on top: it cannot be
        # dropped while it may still arrive, and counting it here would drop the newest.
        return len(self._items) > self.bounds.items or self._bytes > self.bounds.bytes

    def take(self, limit: int) -> list[Any]:
        """The oldest ``limit`` items, now in flight (call with ``cond`` held)."""
        assert not self._out, "one batch in flight at a time"
        while self._items and len(self._out) < limit:
            pair = self._items.popleft()
            if pair[1] is None:
                self._unsized -= 1
            else:
                self._bytes -= pair[1]
                self._out_bytes += pair[1]
            self._out.append(pair)
        return [item for item, _ in self._out]

    def done(self, sent: bool, reason: str = "") -> int:
        """The batch in flight was sent (or, with ``reason``, given up); else it goes
        back to the front, oldest first, measured, and the bounds apply again. Returns
        how many items that put-back dropped."""
        extra = 0
        with self.cond:
            if not sent and not reason:
                self._measure_out()
                self._measure_waiting()
            out, self._out, self._out_bytes = self._out, [], 0
            self._holding = not sent and not reason
            if sent:
                self.sent += len(out)
            elif reason:
                self.dropped[reason] = self.dropped.get(reason, 0) + len(out)
            else:
                self._items.extendleft(reversed(out))
                self._bytes += sum(size or 0 for _, size in out)
                extra = self._trim()
            self.last_change = time.monotonic()
            self.cond.notify_all()
        return extra

    def drop_all(self, reason: str) -> int:
        """Gives up everything not in flight (the exit's budget is spent)."""
        with self.cond:
            n = len(self.inbox)
            self.inbox.clear()
            n += len(self._items)
            self._items.clear()
            self._bytes = 0
            self._unsized = 0
            if n:
                self.dropped[reason] = self.dropped.get(reason, 0) + n
            self.cond.notify_all()
            return n

    def held(self) -> tuple[int, int]:
        """(items, bytes) held now, the batch in flight included (what was not
        measured yet is measured here: a status is asked for rarely)."""
        with self.cond:
            self._measure_waiting()
            self._measure_out()
            inbox = list(self.inbox)  # the sender takes them in next
            return (len(self._items) + len(self._out) + len(inbox),
                    self._bytes + self._out_bytes + sum(map(self._size_of, inbox)))

    def waiting(self) -> int:
        """Items not yet taken, the inbox's included (call with ``cond`` held)."""
        return len(self._items) + len(self.inbox)

    def in_flight(self) -> int:
        return len(self._out)


# --- sizes: roughly what OTLP/protobuf spends on an item ---------------------------


def _attrs_size(attrs: Mapping[str, Any] | None) -> int:
    if not attrs:
        return 0
    total = 0
    for key, value in attrs.items():
        total += len(key) + 4
        if isinstance(value, (str, bytes, bytearray)):
            total += len(value)
        elif isinstance(value, (list, tuple)):
            total += sum(len(x) if isinstance(x, str) else 9 for x in value) + 2
        else:
            total += 9
    return total


def span_size(span: Any) -> int:
    size = 64 + len(span.name or "") + _attrs_size(span.attributes)
    for event in span.events or ():
        size += 24 + len(event.name) + _attrs_size(event.attributes)
    for link in span.links or ():
        size += 40 + _attrs_size(link.attributes)
    description = getattr(span.status, "description", None)
    return size + (len(description) if description else 0)


def log_size(data: Any) -> int:
    record = getattr(data, "log_record", data)  # LogData (SDK < 1.39) or a record
    body = getattr(record, "body", None)
    text = body if isinstance(body, str) else (repr(body) if body is not None else "")
    return 48 + len(text) + _attrs_size(getattr(record, "attributes", None))


def metrics_size(data: Any) -> int:
    size = 0
    for rm in data.resource_metrics:
        size += 32 + _attrs_size(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                size += 32 + len(metric.name) + len(metric.description or "")
                for point in getattr(metric.data, "data_points", ()):
                    buckets = len(getattr(point, "bucket_counts", ()) or ())
                    size += 40 + 16 * buckets + _attrs_size(point.attributes)
                    size += 48 * len(getattr(point, "exemplars", ()) or ())
    return size
