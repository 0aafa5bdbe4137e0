"""The log bridge: the ``adk_task_telemetry`` logger's WARNINGs become OTel log records.

They are emitted inside the task span, so the record carries its trace. Our own
export-health messages are about the pipeline itself and stay local.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from opentelemetry.sdk._logs import LoggingHandler

from .. import semconv as sc


def bridge_logger(provider: Any) -> logging.Handler | None:
    """Adds the SDK's LoggingHandler to our logger, unless a bridge already sees it."""
    ours = logging.getLogger(sc.LOGGER_NAME)
    for lg in (ours, logging.getLogger()):
        # The SDK's handler, or the one of opentelemetry-instrumentation-logging.
        if any(isinstance(h, LoggingHandler) or type(h).__name__ == "LoggingHandler"
               for h in lg.handlers):
            return None
    with warnings.catch_warnings():  # deprecated in favour of a contrib package; still works
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(level=logging.WARNING, logger_provider=provider)
    handler.addFilter(lambda r: not r.name.startswith(sc.EXPORT_LOGGER_NAME))
    ours.addHandler(handler)
    # With a handler on our logger, Python's last-resort stderr output no longer
    # applies to it: without one on the root logger, our export warnings would vanish.
    export_logger = logging.getLogger(sc.EXPORT_LOGGER_NAME)
    if not any(isinstance(h, _LastResort) for h in export_logger.handlers):
        export_logger.addHandler(_LastResort())
    return handler


def unbridge(handler: logging.Handler | None) -> None:
    if handler is not None:
        logging.getLogger(sc.LOGGER_NAME).removeHandler(handler)


class _LastResort(logging.Handler):
    """What ``logging.lastResort`` does for an application that configured no logging
    (WARNING and above to stderr), for our export warnings only."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers and logging.lastResort is not None:
            logging.lastResort.handle(record)
